// Package service gives every jetrl service the same presence on NATS: a micro service for discovery
// (name, id, metadata) with a status endpoint that answers with the service's counters as JSON.
package service

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// Announce registers the service; status is called on each request to proto.SubjectStatus(name).
// Every replica answers (no queue group), so an operator's request gathers all of them.
func Announce(nc *nats.Conn, name, id string, status func() any) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "jetrl-" + name,
		Version:     "1.0.0",
		Description: "jetrl " + name,
		Metadata:    map[string]string{"id": id},
	})
	if err != nil {
		return nil, fmt.Errorf("announce %s: %w", name, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) {
		b, err := json.Marshal(map[string]any{"service": name, "id": id, "status": status()})
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		_ = r.Respond(b)
	}), micro.WithEndpointSubject(proto.SubjectStatus(name)), micro.WithEndpointQueueGroupDisabled())
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("announce %s: %w", name, err)
	}
	return svc, nil
}

// NewID returns a short random id for a service replica (rollout, trainer, ...) that was given none.
func NewID() string {
	// The last part of a NUID is the per-call sequence; its first part is shared by the whole process.
	return strings.ToLower(nuid.Next()[12:])
}
