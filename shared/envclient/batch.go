package envclient

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// maxYields bounds how often a batch's leader lets other goroutines run before it sends the batch.
const maxYields = 4

// fallbackFor is how long a batch subject that nobody answered is passed over for single calls (a host
// of a version without batches, or no host yet), before batches are tried on it again.
const fallbackFor = 10 * time.Second

// call is one start or step waiting in a batcher, then in a sent batch, for its result.
type call struct {
	start *proto.EnvStartRequest
	step  *proto.EnvStepRequest
	done  chan callResult // buffered: the one result is sent without waiting
	// Guarded by replies.mu: the batch it was sent in, and whether it has had its result or was given up.
	batch    *sentBatch
	answered bool
}

// callResult is what a call gets: a result of the batch reply, an error for the whole batch, or single:
// send this call on its own (the batch subject has no responder, or the batch could not be encoded).
type callResult struct {
	res    proto.EnvBatchResult
	err    error
	single bool
}

// batcher coalesces the calls to one batch subject that wait at the same moment into one message. There
// is no timer and no goroutine of its own: the call that finds the queue empty leads it, lets the other
// goroutines that are ready run (so that those about to call join), and sends what has queued by then.
// Under load, calls come back together in one reply and go out together again; a lone call waits for no one.
type batcher struct {
	c       *Client
	subject string
	starts  bool

	mu      sync.Mutex
	queue   []*call
	leading bool
	// expected are the sessions likely to call soon: each had a step result that did not end it, or was
	// started on this batcher's host, and has not called since. A leader waits for them up to
	// Config.MaxLinger; when that passes, whoever has not come (a session that stopped without a last
	// call) is forgotten, so it delays one batch at most.
	expected map[string]struct{}
	// wake, while a leader waits for the expected sessions, is closed when the last of them has called.
	wake     chan struct{}
	fallback atomic.Int64 // unix nanoseconds until which calls go singly
}

// maxExpected bounds a batcher's expected sessions: one whose next call never reaches the batcher (its
// host's breaker refused it, or the host is called singly) is not removed by that call, and no leader
// may come to forget it.
const maxExpected = 1 << 14

// expectCall says session is likely to call soon.
func (b *batcher) expectCall(session string) {
	b.mu.Lock()
	if b.expected == nil || len(b.expected) >= maxExpected {
		b.expected = map[string]struct{}{}
	}
	b.expected[session] = struct{}{}
	b.mu.Unlock()
}

// forget says session will not call again (it was cancelled): a batch waiting for the sessions expected
// goes as soon as the rest have called, instead of at Config.MaxLinger.
func (b *batcher) forget(session string) {
	b.mu.Lock()
	delete(b.expected, session)
	if b.wake != nil && len(b.expected) == 0 {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}

// useSingle says whether calls should skip batching for now.
func (b *batcher) useSingle() bool { return time.Now().UnixNano() < b.fallback.Load() }

// enqueue adds c to the next batch, sending the batch if this call leads it.
func (b *batcher) enqueue(c *call) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if c.step != nil {
		delete(b.expected, c.step.SessionID)
	}
	if b.wake != nil && len(b.expected) == 0 {
		close(b.wake)
		b.wake = nil
	}
	lead := !b.leading
	b.leading = true
	b.mu.Unlock()
	if !lead {
		return
	}
	// Yield while others join: once, and again as long as the queue grew meanwhile (a few times at most).
	for n, seen := 0, 1; n < maxYields; n++ {
		runtime.Gosched()
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == seen {
			break
		}
		seen = queued
	}
	b.linger()
	b.mu.Lock()
	calls := b.queue
	b.queue, b.leading = nil, false
	b.mu.Unlock()
	for len(calls) > 0 {
		n := min(len(calls), proto.MaxEnvBatchItems)
		b.send(calls[:n])
		calls = calls[n:]
	}
}

// linger waits until every session expected has called, for Config.MaxLinger at most; then it forgets
// those that did not come.
func (b *batcher) linger() {
	b.mu.Lock()
	if len(b.expected) == 0 || b.c.cfg.MaxLinger < 0 {
		clear(b.expected)
		b.mu.Unlock()
		return
	}
	wake := make(chan struct{})
	b.wake = wake
	b.mu.Unlock()
	t := time.NewTimer(b.c.cfg.MaxLinger)
	select {
	case <-wake:
	case <-t.C:
	}
	t.Stop()
	b.mu.Lock()
	if b.wake == wake { // not woken: whoever is still expected is not coming soon
		b.wake = nil
		clear(b.expected)
	}
	b.mu.Unlock()
}

// send publishes one batch with a reply subject of its own on the client's reply subscription.
func (b *batcher) send(calls []*call) {
	r, err := b.c.replySub()
	if err != nil {
		for _, c := range calls {
			c.done <- callResult{err: fmt.Errorf("%w: reply subscription: %v", proto.ErrEnvUnavailable, err)}
		}
		return
	}
	var data []byte
	if b.starts {
		req := proto.EnvStartBatch{Schema: proto.SchemaVersion, Starts: make([]proto.EnvStartRequest, len(calls))}
		for i, c := range calls {
			req.Starts[i] = *c.start
		}
		data, err = codec.Marshal(req, proto.MaxEnvBatchBytes)
	} else {
		req := proto.EnvStepBatch{Schema: proto.SchemaVersion, Steps: make([]proto.EnvStepRequest, len(calls))}
		for i, c := range calls {
			req.Steps[i] = *c.step
		}
		data, err = codec.Marshal(req, proto.MaxEnvBatchBytes)
	}
	if err != nil { // too large together: each goes on its own, under the single call's limit
		for _, c := range calls {
			c.done <- callResult{single: true}
		}
		return
	}
	sb := r.register(b, calls)
	if sb == nil {
		return // every call gave up while it waited to be sent
	}
	b.c.batches.Add(1)
	b.c.batchedCalls.Add(int64(len(calls)))
	if err := b.c.nc.PublishRequest(b.subject, sb.reply, data); err != nil {
		r.finish(sb, callResult{err: fmt.Errorf("%w: %s: %v", proto.ErrEnvUnavailable, b.subject, err)})
	}
}

// sentBatch is a batch on its way: its calls by index, how many still wait, and which the host answered.
type sentBatch struct {
	b     *batcher
	reply string
	calls []*call
	left  int
	// results marks, by index, the calls that a result of a reply named (guarded by replies.mu): a call
	// that gave up may still have its result, but none may have two.
	results []bool
}

// replies routes batch replies, which come to one subscription of the client, to the calls they answer.
type replies struct {
	prefix string
	sub    *nats.Subscription
	// malformed counts batch replies that could not be decoded (their calls fail with ErrMalformed), and
	// results in them that could not be used: one without a reply (its call fails with ErrMalformed), or
	// one whose index names no call of the batch or a call another result already answered.
	malformed atomic.Int64

	mu      sync.Mutex
	pending map[string]*sentBatch
	// late holds, for lateStartGrace, the start batches no caller waits for any more: a session their
	// reply still opens is given back (Client.cancelOrphan) instead of holding a slot of its host.
	late map[string]*sentBatch
}

// lateStartGrace is how long a start batch whose callers all gave up is remembered for its reply.
const lateStartGrace = time.Minute

func (r *replies) register(b *batcher, calls []*call) *sentBatch {
	token := nuid.Next()
	sb := &sentBatch{b: b, reply: r.prefix + token, calls: calls, results: make([]bool, len(calls))}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range calls {
		c.batch = sb
		if !c.answered {
			sb.left++
		}
	}
	if sb.left == 0 {
		return nil
	}
	r.pending[token] = sb
	return sb
}

// deliver gives call i of sb its result, unless it has one or gave up; it reports whether it did.
func (r *replies) deliver(sb *sentBatch, i int, res callResult) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(sb.calls) || sb.calls[i].answered {
		return false
	}
	c := sb.calls[i]
	c.answered = true
	c.done <- res
	if sb.left--; sb.left == 0 {
		delete(r.pending, strings.TrimPrefix(sb.reply, r.prefix))
	}
	return true
}

// claim marks call i of sb as named by a result of a reply; it reports false if i names no call of sb or
// a call that an earlier result named.
func (r *replies) claim(sb *sentBatch, i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(sb.calls) || sb.results[i] {
		return false
	}
	sb.results[i] = true
	return true
}

// finish gives every call of sb that still waits the same result.
func (r *replies) finish(sb *sentBatch, res callResult) {
	for i := range sb.calls {
		r.deliver(sb, i, res)
	}
}

// abandon marks a call whose caller stopped waiting (timeout, cancellation), so its batch is forgotten
// once no call of it waits.
func (r *replies) abandon(c *call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.answered {
		return
	}
	c.answered = true
	if sb := c.batch; sb != nil {
		if sb.left--; sb.left == 0 {
			token := strings.TrimPrefix(sb.reply, r.prefix)
			delete(r.pending, token)
			if sb.b.starts {
				if r.late == nil {
					r.late = map[string]*sentBatch{}
				}
				r.late[token] = sb
				time.AfterFunc(lateStartGrace, func() {
					r.mu.Lock()
					delete(r.late, token)
					r.mu.Unlock()
				})
			}
		}
	}
}

// waiting is the number of batches with calls still waiting for results (for tests).
func (r *replies) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// onReply handles one message on the reply subscription.
func (r *replies) onReply(m *nats.Msg) {
	token := strings.TrimPrefix(m.Subject, r.prefix)
	r.mu.Lock()
	sb := r.pending[token]
	if sb == nil {
		sb = r.late[token]
		delete(r.late, token)
	}
	r.mu.Unlock()
	if sb == nil {
		return // every call of the batch has its result or gave up
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" { // no responders on the batch subject
		sb.b.fallback.Store(time.Now().Add(fallbackFor).UnixNano())
		r.finish(sb, callResult{single: true})
		return
	}
	if desc := m.Header.Get(micro.ErrorHeader); desc != "" {
		known := proto.ErrorFromWire(desc)
		r.finish(sb, callResult{err: fmt.Errorf("%w%s", known, strings.TrimPrefix(desc, known.Error()))})
		return
	}
	var rep proto.EnvBatchReply
	if err := codec.Unmarshal(m.Data, &rep); err != nil {
		r.malformed.Add(1)
		r.finish(sb, callResult{err: fmt.Errorf("batch reply from %s: %w", sb.b.subject, err)})
		return
	}
	// Every session of the reply that will call again is expected before any caller has its result: a
	// caller woken first leads the next batch at once, and must wait for the rest of its reply too.
	for _, res := range rep.Results {
		switch {
		case res.Error != "":
		case sb.b.starts && res.Start != nil:
			sb.b.c.stepBatcher(res.Start.HostID).expectCall(res.Start.SessionID)
		case !sb.b.starts && res.Step != nil && !res.Step.Done && res.Index >= 0 && res.Index < len(sb.calls):
			sb.b.expectCall(sb.calls[res.Index].step.SessionID)
		}
	}
	for _, res := range rep.Results {
		if !r.claim(sb, res.Index) { // an index out of range, or a second result for one call: not delivered
			r.malformed.Add(1)
			continue
		}
		switch {
		case res.Error != "":
			known := proto.ErrorFromWire(res.Error)
			r.deliver(sb, res.Index, callResult{err: fmt.Errorf("%w%s", known, strings.TrimPrefix(res.Error, known.Error()))})
		case (sb.b.starts && res.Start == nil) || (!sb.b.starts && res.Step == nil):
			r.malformed.Add(1)
			r.deliver(sb, res.Index, callResult{err: fmt.Errorf("%w: batch result %d from %s has no reply", proto.ErrMalformed, res.Index, sb.b.subject)})
		default:
			if !r.deliver(sb, res.Index, callResult{res: res}) && res.Start != nil {
				sb.b.c.cancelOrphan(res.Start) // its caller gave up: nobody would play or cancel it
			}
		}
	}
}

// errBatchSkipped says a call was not batched and must be made on its own.
var errBatchSkipped = errors.New("send singly")
