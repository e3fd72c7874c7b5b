package replaybuffer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// runningBuffer is a buffer run on its own goroutine; err is Run's result once done is closed.
type runningBuffer struct {
	b    *replaybuffer.Buffer
	done chan struct{}
	err  error
	stop func()
}

func (m *mesh) runBuffer(t *testing.T, cfg replaybuffer.Config) *runningBuffer {
	t.Helper()
	b, err := replaybuffer.New(cfg, replaybuffer.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningBuffer{b: b, done: make(chan struct{})}
	go func() {
		r.err = b.Run(ctx)
		close(r.done)
	}()
	r.stop = func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("buffer %s did not stop", cfg.ID)
		}
	}
	t.Cleanup(r.stop)
	return r
}

func (m *mesh) leaseKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// leaseHolder is the id holding the lease ("" when none does).
func (m *mesh) leaseHolder(t *testing.T) string {
	t.Helper()
	e, err := m.leaseKV(t).Get(testCtx(t), proto.KeyReplayBufferLease)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := strings.Cut(string(e.Value()), "/")
	return id
}

// A second replay-buffer consumes nothing while the first holds the lease; it takes over at once when the
// first stops.
func TestSecondBufferStandsByUntilTheFirstStops(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	c := cfg(2)
	c.ID, c.LeaseTTL = "first", 4*time.Second // renewals get ttl/5 each, long beside a busy machine's round trips
	first := m.runBuffer(t, c)
	eventually(t, 10*time.Second, "the first buffer to run", first.b.Running)
	c.ID = "second"
	second := m.runBuffer(t, c)
	eventually(t, 10*time.Second, "the second buffer to stand by", func() bool { return second.b.Stats().Standby == "first" })

	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	// Two ttls pass: the first renews its lease, the second keeps standing by.
	time.Sleep(2 * c.LeaseTTL)
	if s := second.b.Stats(); second.b.Running() || s.Received != 0 || s.Standby != "first" {
		t.Fatalf("second buffer running %v with %+v while the first holds the lease", second.b.Running(), s)
	}
	if got := first.b.Stats().Received; got != 2 || m.leaseHolder(t) != "first" {
		t.Fatalf("first buffer received %d episodes, lease held by %q: want 2 and the first", got, m.leaseHolder(t))
	}

	first.stop() // deletes its lease: the second takes over without waiting for it to lapse
	if first.err != nil {
		t.Fatalf("first buffer: Run returned %v", first.err)
	}
	stopped := time.Now()
	eventually(t, 10*time.Second, "the second buffer to take over", func() bool { return second.b.Stats().Standby == "" })
	if took := time.Since(stopped); took >= c.LeaseTTL {
		t.Errorf("the second buffer took %v to take over a released lease, want under the ttl %v", took, c.LeaseTTL)
	}
	eventually(t, 10*time.Second, "the second buffer to run", second.b.Running)
	if h := m.leaseHolder(t); h != "second" {
		t.Fatalf("lease held by %q, want the second", h)
	}
	m.publish(t, ep("g2", 0, 2, 0), "")
	m.publish(t, ep("g2", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the second buffer's batch", func() bool { return m.msgs(t, proto.StreamBatches) == 2 })
	select {
	case <-second.done:
		t.Fatalf("the second buffer stopped: %v", second.err)
	default:
	}
}

// A lease its holder stopped renewing (a crashed buffer) is taken over after its ttl, and a buffer whose
// lease another took over stops with ErrFenced, leaving the other's lease in place.
func TestLapsedLeaseIsTakenOverAndTheFormerHolderFenced(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	kv := m.leaseKV(t)
	if _, err := kv.Create(testCtx(t), proto.KeyReplayBufferLease, []byte("crashed/run-1")); err != nil {
		t.Fatal(err)
	}
	c := cfg(2)
	c.ID, c.LeaseTTL = "next", 2*time.Second
	r := m.runBuffer(t, c)
	eventually(t, 10*time.Second, "the buffer to stand by", func() bool { return r.b.Stats().Standby == "crashed" })
	start := time.Now()
	eventually(t, 20*time.Second, "the lapsed lease taken over", func() bool { return r.b.Stats().Standby == "" })
	if took := time.Since(start); took < c.LeaseTTL/2 {
		t.Errorf("took over after %v, before the lease could lapse (ttl %v)", took, c.LeaseTTL)
	}
	eventually(t, 10*time.Second, "the buffer to run", r.b.Running)
	if h := m.leaseHolder(t); h != "next" {
		t.Fatalf("lease held by %q, want next", h)
	}

	// Another buffer takes the lease over (as it would after this one stalled past the ttl).
	if _, err := kv.Put(testCtx(t), proto.KeyReplayBufferLease, []byte("usurper/run-2")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
		if !errors.Is(r.err, replaybuffer.ErrFenced) {
			t.Fatalf("fenced buffer returned %v, want ErrFenced", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the buffer goes on after another took its lease over")
	}
	if h := m.leaseHolder(t); h != "usurper" {
		t.Fatalf("the fenced buffer changed the lease: held by %q", h)
	}
}

func TestLeaseTTLIsValidated(t *testing.T) {
	m := newMesh(t)
	for _, ttl := range []time.Duration{time.Millisecond, time.Hour} {
		c := cfg(2)
		c.LeaseTTL = ttl
		if _, err := replaybuffer.New(c, replaybuffer.Deps{Conn: m.conn(t), Log: zerolog.Nop()}); err == nil || !strings.Contains(err.Error(), "lease ttl") {
			t.Errorf("lease ttl %v: %v, want it refused", ttl, err)
		}
	}
}
