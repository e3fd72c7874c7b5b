// Package bus connects services to NATS: the embedded server, connections, and the mesh's JetStream topology.
package bus

import (
	"fmt"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedConfig configures an in-process NATS server with JetStream.
type EmbeddedConfig struct {
	// StoreDir holds JetStream data; required, so that a restarted process finds its streams again.
	StoreDir string
	// Host and Port to listen on; Port -1 picks a free port.
	Host string
	Port int
	// Name of the server.
	Name string
	// MaxStore caps what file-backed streams may reserve, in bytes; 0 means DefaultMaxStore. It is a
	// reservation ceiling, not an allocation: the streams' MaxBytes limits are counted against it when a
	// stream is created, whatever the disk holds at the time.
	MaxStore int64
}

// DefaultMaxStore is the embedded server's file store ceiling: room for the mesh topology's streams and
// buckets several times over. Left to itself the server takes 75% of the disk free at start, and on a
// machine with little free disk the topology's stream limits (proto.Streams) would not fit.
const DefaultMaxStore int64 = 64 << 30

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server with JetStream and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = -1
	}
	if cfg.Name == "" {
		cfg.Name = "jetrl-embedded"
	}
	if cfg.MaxStore < 0 {
		return nil, fmt.Errorf("embedded nats: MaxStore %d is negative", cfg.MaxStore)
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = DefaultMaxStore
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		// The memory store stays dynamic (75% of RAM); only the file store's ceiling is fixed.
		JetStreamMaxStore: cfg.MaxStore,
		MaxPayload:        proto.ServerMaxPayload,
		NoSigs:            true,
		NoLog:             true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 15s")
	}
	return &Embedded{srv: srv}, nil
}

// InProcess is the connect option that reaches this server from the same process without a socket: the
// client and the server exchange bytes over an in-memory pipe, so no message costs a system call. URL
// stays the address other processes dial.
func (e *Embedded) InProcess() nats.Option { return nats.InProcessServer(e.srv) }

// URL clients connect to.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Traffic is what a server has carried since it started: messages and bytes received from its
// connections (clients' publishes) and sent to them (deliveries, including JetStream's).
type Traffic struct {
	InMsgs, OutMsgs, InBytes, OutBytes int64
}

// Sub returns the traffic carried between an earlier reading o and t.
func (t Traffic) Sub(o Traffic) Traffic {
	return Traffic{InMsgs: t.InMsgs - o.InMsgs, OutMsgs: t.OutMsgs - o.OutMsgs, InBytes: t.InBytes - o.InBytes, OutBytes: t.OutBytes - o.OutBytes}
}

// Msgs is the messages received and sent.
func (t Traffic) Msgs() int64 { return t.InMsgs + t.OutMsgs }

// Traffic reads the server's message counters.
func (e *Embedded) Traffic() (Traffic, error) {
	v, err := e.srv.Varz(nil)
	if err != nil {
		return Traffic{}, fmt.Errorf("embedded nats: varz: %w", err)
	}
	return Traffic{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs, InBytes: v.InBytes, OutBytes: v.OutBytes}, nil
}

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
