package replaybuffer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/rs/zerolog"
)

// The lease lets its holder write only within half its ttl of the last renewal; a renewal that finds its
// own write at a revision it did not see (a lost reply) adopts it rather than fencing itself; one that
// finds another buffer's value is fenced.
func TestLeaseHoldRenewAndFence(t *testing.T) {
	_, js := bustest.Server(t, "lease-test")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.KeyValue(ctx, proto.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second // each renewal's round trips get ttl/5
	l, err := acquireLease(ctx, kv, "b1", ttl, zerolog.Nop(), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.hold(); err != nil {
		t.Fatalf("hold right after acquiring: %v", err)
	}
	time.Sleep(ttl / 2)
	if err := l.hold(); !errors.Is(err, errLeaseUnconfirmed) {
		t.Fatalf("hold half a ttl after the last renewal: %v, want errLeaseUnconfirmed", err)
	}
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.hold(); err != nil || time.Until(l.writeBy()) <= 0 {
		t.Fatalf("hold after a renewal: %v, write by %v", err, l.writeBy())
	}

	// A renewal stored by the server whose reply never came: the revision moved on under this run's value.
	if _, err := kv.Update(ctx, proto.KeyReplayBufferLease, []byte(l.value), l.rev); err != nil {
		t.Fatal(err)
	}
	if err := l.renew(ctx); err == nil || errors.Is(err, ErrFenced) {
		t.Fatalf("renewal after a lost one: %v, want an unconfirmed renewal, not fenced", err)
	}
	if err := l.renew(ctx); err != nil {
		t.Fatalf("renewal on the adopted revision: %v", err)
	}

	// Another buffer's value: fenced, and release leaves it in place.
	if _, err := kv.Put(ctx, proto.KeyReplayBufferLease, []byte("b2/other")); err != nil {
		t.Fatal(err)
	}
	if err := l.renew(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("renewal after another buffer's write: %v, want ErrFenced", err)
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, proto.KeyReplayBufferLease)
	if err != nil || string(e.Value()) != "b2/other" {
		t.Fatalf("after the fenced buffer's release: %v, %v; want b2's lease in place", e, err)
	}
	time.Sleep(ttl)
	if !l.lapsed() {
		t.Fatal("a lease unrenewed for its ttl is not lapsed")
	}
}
