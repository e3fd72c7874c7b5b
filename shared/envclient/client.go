// Package envclient calls env hosts over NATS request/reply, through one circuit breaker per host.
package envclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Config of a client.
type Config struct {
	// CallTimeout bounds one request; a host that does not answer in time counts against its breaker.
	CallTimeout time.Duration
	// StartRetries is how often a start refused for capacity (or unanswered) is tried again.
	StartRetries int
	Breaker      breaker.Settings
}

// Client talks to env hosts.
type Client struct {
	nc       *nats.Conn
	cfg      Config
	breakers *breaker.Set[*nats.Msg]
}

// New returns a client on nc.
func New(nc *nats.Conn, cfg Config) *Client {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.StartRetries == 0 {
		cfg.StartRetries = 20
	}
	return &Client{nc: nc, cfg: cfg, breakers: breaker.NewSet[*nats.Msg](cfg.Breaker)}
}

// Breakers exposes the per-host breakers (for metrics and tests).
func (c *Client) Breakers() *breaker.Set[*nats.Msg] { return c.breakers }

// Start opens a session on some host with free capacity.
func (c *Client) Start(ctx context.Context, req proto.EnvStartRequest) (*proto.EnvStartReply, error) {
	req.Schema = proto.SchemaVersion
	data, err := codec.Marshal(req, proto.MaxEnvMessageBytes)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt <= c.cfg.StartRetries; attempt++ {
		if attempt > 0 {
			wait := time.Duration(min(attempt, 10)) * 50 * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		msg, err := c.request(ctx, proto.SubjectEnvStart, data)
		if err == nil {
			var rep proto.EnvStartReply
			if err := codec.Unmarshal(msg.Data, &rep); err != nil {
				return nil, err
			}
			return &rep, nil
		}
		lastErr = err
		// A full or stopping host, or no answer: another host of the queue group may take the next try.
		if !errors.Is(err, proto.ErrHostFull) && !errors.Is(err, proto.ErrShuttingDown) && !errors.Is(err, proto.ErrEnvUnavailable) && !errors.Is(err, proto.ErrEnvTimeout) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("start %s: %w", req.Task, lastErr)
}

// Step sends one call to the session's host, through that host's breaker.
func (c *Client) Step(ctx context.Context, hostID, sessionID string, call proto.ToolCall) (*proto.EnvStepReply, error) {
	data, err := codec.Marshal(proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: sessionID, Call: call}, proto.MaxEnvMessageBytes)
	if err != nil {
		return nil, err
	}
	msg, err := c.breakers.Execute(hostID, func() (*nats.Msg, error) {
		return c.request(ctx, proto.SubjectEnvStep(hostID), data)
	})
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", hostID, err)
	}
	var rep proto.EnvStepReply
	if err := codec.Unmarshal(msg.Data, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Cancel ends a session; errors are returned but a caller that is giving up on a session may ignore them.
func (c *Client) Cancel(ctx context.Context, hostID, sessionID string) error {
	data, err := codec.Marshal(proto.EnvCancelRequest{Schema: proto.SchemaVersion, SessionID: sessionID}, proto.MaxEnvMessageBytes)
	if err != nil {
		return err
	}
	_, err = c.request(ctx, proto.SubjectEnvCancel(hostID), data)
	return err
}

// request does one request and turns transport failures and error replies into catalogued errors.
func (c *Client) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, subject, data)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: no responders on %s", proto.ErrEnvUnavailable, subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: %s after %v", proto.ErrEnvTimeout, subject, c.cfg.CallTimeout)
	default:
		return nil, fmt.Errorf("%w: %s: %v", proto.ErrEnvUnavailable, subject, err)
	}
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" {
		known := proto.ErrorFromWire(desc)
		return nil, fmt.Errorf("%w%s", known, strings.TrimPrefix(desc, known.Error()))
	}
	return msg, nil
}
