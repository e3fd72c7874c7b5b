// Package envclient calls env hosts over NATS request/reply, through one circuit breaker per host.
package envclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/sony/gobreaker/v2"
)

// Config of a client.
type Config struct {
	// CallTimeout bounds one request; a host that does not answer in time counts against its breaker.
	CallTimeout time.Duration
	// StartRetries is how often a start refused for capacity (or unanswered) is tried again.
	StartRetries int
	Breaker      breaker.Settings
	// Unbatched sends every start and step as a request of its own. By default the calls that wait at the
	// same moment go out together, one EnvStartBatch or EnvStepBatch per subject (see batcher), and a
	// host that does not serve batches is called singly.
	Unbatched bool
	// MaxLinger bounds how long a batch waits for the calls expected soon: sessions that had a result (or
	// were started on the host) and have not called again, most often because their policy is choosing.
	// Waiting for them puts a rollout's episodes on a host into one message a turn. 0 means
	// DefaultMaxLinger; negative sends what has queued at once.
	MaxLinger time.Duration
}

// DefaultMaxLinger is about the time a policy takes to choose the next calls of a rollout's episodes,
// and small next to an env step that waits on anything.
const DefaultMaxLinger = 500 * time.Microsecond

// Client talks to env hosts.
type Client struct {
	nc       *nats.Conn
	cfg      Config
	breakers *breaker.Set[*proto.EnvStepReply]

	starts *batcher
	mu     sync.Mutex
	steps  map[string]*batcher // by host
	reply  *replies            // made on the first batch, unsubscribed by Close

	batches, batchedCalls atomic.Int64
	startsOnOpen          atomic.Int64
	orphans               atomic.Int64
}

// New returns a client on nc; Close releases its reply subscription.
func New(nc *nats.Conn, cfg Config) *Client {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.StartRetries == 0 {
		cfg.StartRetries = 20
	}
	if cfg.MaxLinger == 0 {
		cfg.MaxLinger = DefaultMaxLinger
	}
	c := &Client{nc: nc, cfg: cfg, breakers: breaker.NewSet[*proto.EnvStepReply](cfg.Breaker), steps: map[string]*batcher{}}
	c.starts = &batcher{c: c, subject: proto.SubjectEnvStartBatch, starts: true}
	return c
}

// Breakers exposes the per-host breakers (for metrics and tests).
func (c *Client) Breakers() *breaker.Set[*proto.EnvStepReply] { return c.breakers }

// Close stops the client's batch reply subscription; calls still waiting on it time out.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply == nil {
		return nil
	}
	err := c.reply.sub.Unsubscribe()
	c.reply = nil
	return err
}

// BatchStats says how the client's calls travelled.
type BatchStats struct {
	// Batches and Calls count the batch requests sent and the calls they carried; Calls / Batches is the
	// mean batch size.
	Batches, Calls int64
	// Malformed counts batch replies, or results in them, that could not be used (their calls failed
	// with ErrMalformed).
	Malformed int64
	// Waiting is the number of sent batches with calls still waiting for their results.
	Waiting int
	// StartsOnOpenHosts counts sessions given back at once because their host's breaker was open.
	StartsOnOpenHosts int64
	// OrphanStarts counts sessions given back because their start's reply came after its caller gave up.
	OrphanStarts int64
}

// BatchStats returns the client's batch counters.
func (c *Client) BatchStats() BatchStats {
	st := BatchStats{Batches: c.batches.Load(), Calls: c.batchedCalls.Load(), StartsOnOpenHosts: c.startsOnOpen.Load(), OrphanStarts: c.orphans.Load()}
	c.mu.Lock()
	r := c.reply
	c.mu.Unlock()
	if r != nil {
		st.Malformed, st.Waiting = r.malformed.Load(), r.waiting()
	}
	return st
}

// replySub returns the subscription batch replies come to, subscribing on first use.
func (c *Client) replySub() (*replies, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply != nil {
		return c.reply, nil
	}
	r := &replies{prefix: c.nc.NewInbox() + ".", pending: map[string]*sentBatch{}}
	sub, err := c.nc.Subscribe(r.prefix+"*", r.onReply)
	if err != nil {
		return nil, err
	}
	r.sub = sub
	c.reply = r
	return r, nil
}

func (c *Client) stepBatcher(hostID string) *batcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.steps[hostID]
	if !ok {
		b = &batcher{c: c, subject: proto.SubjectEnvStepBatch(hostID)}
		c.steps[hostID] = b
	}
	return b
}

// batched sends cl through b and waits for its result within CallTimeout; errBatchSkipped means: make
// this call on its own.
func (c *Client) batched(ctx context.Context, b *batcher, cl *call) (proto.EnvBatchResult, error) {
	if c.cfg.Unbatched || b.useSingle() {
		return proto.EnvBatchResult{}, errBatchSkipped
	}
	// A timer of its own rather than a context.WithTimeout: no child context to register with the caller's
	// on every step of every episode.
	timeout := time.NewTimer(c.cfg.CallTimeout)
	defer timeout.Stop()
	cl.done = make(chan callResult, 1)
	b.enqueue(cl)
	select {
	case res := <-cl.done:
		if res.single {
			return proto.EnvBatchResult{}, errBatchSkipped
		}
		return res.res, res.err
	case <-ctx.Done():
		c.abandon(cl)
		return proto.EnvBatchResult{}, ctx.Err()
	case <-timeout.C:
		c.abandon(cl)
		if ctx.Err() != nil { // both ended: the caller's reason wins, as it is no fault of the host
			return proto.EnvBatchResult{}, ctx.Err()
		}
		return proto.EnvBatchResult{}, fmt.Errorf("%w: %s after %v", proto.ErrEnvTimeout, b.subject, c.cfg.CallTimeout)
	}
}

// abandon forgets a batched call whose caller stopped waiting.
func (c *Client) abandon(cl *call) {
	c.mu.Lock()
	r := c.reply
	c.mu.Unlock()
	if r != nil {
		r.abandon(cl)
	}
}

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
		rep, err := c.startOnce(ctx, &req, data)
		if err == nil && c.breakers.State(rep.HostID) == gobreaker.StateOpen {
			// The host answered, but every step to it would be refused until its breaker half-opens: give
			// the session back and let another host (or this one, later) take the start.
			_ = c.Cancel(context.WithoutCancel(ctx), rep.HostID, rep.SessionID)
			c.startsOnOpen.Add(1)
			err = fmt.Errorf("%w: host %s answered the start but its breaker is open", proto.ErrEnvUnavailable, rep.HostID)
		}
		if err == nil {
			return rep, nil
		}
		lastErr = err
		// A full or stopping host, or no answer: another host of the queue group may take the next try.
		if !errors.Is(err, proto.ErrHostFull) && !errors.Is(err, proto.ErrShuttingDown) && !errors.Is(err, proto.ErrEnvUnavailable) && !errors.Is(err, proto.ErrEnvTimeout) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("start %s: %w", req.Task, lastErr)
}

// startOnce makes one attempt at a start: in a batch, or on its own.
func (c *Client) startOnce(ctx context.Context, req *proto.EnvStartRequest, data []byte) (*proto.EnvStartReply, error) {
	res, err := c.batched(ctx, c.starts, &call{start: req})
	if err == nil {
		return res.Start, nil
	}
	if !errors.Is(err, errBatchSkipped) {
		return nil, err
	}
	return c.startSingle(ctx, data)
}

// startSingle makes a start as a request of its own, on an inbox of its own rather than the connection's
// shared one, which drops a reply that comes after its request gave up: a late reply opened a session
// nobody will play, and it is cancelled on its host (cancelOrphan), as the batched path does. The inbox
// waits for such a reply for lateStartGrace.
func (c *Client) startSingle(ctx context.Context, data []byte) (*proto.EnvStartReply, error) {
	inbox := c.nc.NewInbox()
	got := make(chan *nats.Msg, 1)
	var mu sync.Mutex
	waiting := true
	sub, err := c.nc.Subscribe(inbox, func(m *nats.Msg) {
		mu.Lock()
		w := waiting
		if w {
			got <- m
		}
		mu.Unlock()
		if !w {
			c.lateStart(m)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", proto.ErrEnvUnavailable, proto.SubjectEnvStart, err)
	}
	_ = sub.AutoUnsubscribe(1)
	giveUp := func() {
		mu.Lock()
		waiting = false
		mu.Unlock()
		select {
		case m := <-got: // came as the wait ended
			c.lateStart(m)
			_ = sub.Unsubscribe()
		default:
			time.AfterFunc(lateStartGrace, func() { _ = sub.Unsubscribe() })
		}
	}
	if err := c.nc.PublishRequest(proto.SubjectEnvStart, inbox, data); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("%w: %s: %v", proto.ErrEnvUnavailable, proto.SubjectEnvStart, err)
	}
	timeout := time.NewTimer(c.cfg.CallTimeout)
	defer timeout.Stop()
	var msg *nats.Msg
	select {
	case msg = <-got:
	case <-ctx.Done():
		giveUp()
		return nil, ctx.Err()
	case <-timeout.C:
		giveUp()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s after %v", proto.ErrEnvTimeout, proto.SubjectEnvStart, c.cfg.CallTimeout)
	}
	if noResponders(msg) {
		return nil, fmt.Errorf("%w: no responders on %s", proto.ErrEnvUnavailable, proto.SubjectEnvStart)
	}
	if err := replyError(msg); err != nil {
		return nil, err
	}
	var rep proto.EnvStartReply
	if err := codec.Unmarshal(msg.Data, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// lateStart cancels the session a start reply opened after its caller gave up (an error reply opened none).
func (c *Client) lateStart(m *nats.Msg) {
	if noResponders(m) || m.Header.Get(micro.ErrorHeader) != "" {
		return
	}
	var rep proto.EnvStartReply
	if err := codec.Unmarshal(m.Data, &rep); err != nil || rep.SessionID == "" || rep.HostID == "" {
		return
	}
	c.cancelOrphan(&rep)
}

// noResponders reports the server's answer to a request no subscriber took: an empty message whose Status
// header is 503.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// requestReply does one single request and decodes its reply.
func requestReply[T any](ctx context.Context, c *Client, subject string, data []byte) (*T, error) {
	msg, err := c.request(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	var rep T
	if err := codec.Unmarshal(msg.Data, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Step sends one call to the session's host, through that host's breaker.
func (c *Client) Step(ctx context.Context, hostID, sessionID string, tc proto.ToolCall) (*proto.EnvStepReply, error) {
	req := proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: sessionID, Call: tc}
	var data []byte
	encode := func() (err error) {
		if data == nil {
			data, err = codec.Marshal(req, proto.MaxEnvMessageBytes)
		}
		return err
	}
	// A request that may be near the limit is refused here, before it can travel in a batch.
	if len(sessionID)+len(tc.Name)+len(tc.Arguments) > proto.MaxEnvMessageBytes/2 {
		if err := encode(); err != nil {
			return nil, err
		}
	}
	rep, err := c.breakers.Execute(hostID, func() (*proto.EnvStepReply, error) {
		res, err := c.batched(ctx, c.stepBatcher(hostID), &call{step: &req})
		if err == nil {
			return res.Step, nil
		}
		if !errors.Is(err, errBatchSkipped) {
			return nil, err
		}
		if err := encode(); err != nil {
			return nil, err
		}
		return requestReply[proto.EnvStepReply](ctx, c, proto.SubjectEnvStep(hostID), data)
	})
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", hostID, err)
	}
	return rep, nil
}

// Cancel ends a session; errors are returned but a caller that is giving up on a session may ignore them.
// The session will not call again: its host's step batch no longer waits for it.
func (c *Client) Cancel(ctx context.Context, hostID, sessionID string) error {
	c.mu.Lock()
	b := c.steps[hostID]
	c.mu.Unlock()
	if b != nil {
		b.forget(sessionID)
	}
	data, err := codec.Marshal(proto.EnvCancelRequest{Schema: proto.SchemaVersion, SessionID: sessionID}, proto.MaxEnvMessageBytes)
	if err != nil {
		return err
	}
	_, err = c.request(ctx, proto.SubjectEnvCancel(hostID), data)
	return err
}

// cancelOrphan gives back a session whose start reply came after its caller stopped waiting: nobody will
// play or cancel it, and it would hold a slot of its host until it idled out. The cancel is published
// without waiting for its answer (it runs on the reply subscription's goroutine); a lost one leaves the
// session to the host's idle expiry.
func (c *Client) cancelOrphan(rep *proto.EnvStartReply) {
	c.orphans.Add(1)
	c.stepBatcher(rep.HostID).forget(rep.SessionID)
	data, err := codec.Marshal(proto.EnvCancelRequest{Schema: proto.SchemaVersion, SessionID: rep.SessionID}, proto.MaxEnvMessageBytes)
	if err == nil {
		_ = c.nc.Publish(proto.SubjectEnvCancel(rep.HostID), data)
	}
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
	if err := replyError(msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// replyError is the catalogued error an error reply carries (micro's error header), nil for a result.
func replyError(msg *nats.Msg) error {
	desc := msg.Header.Get(micro.ErrorHeader)
	if desc == "" {
		return nil
	}
	known := proto.ErrorFromWire(desc)
	return fmt.Errorf("%w%s", known, strings.TrimPrefix(desc, known.Error()))
}
