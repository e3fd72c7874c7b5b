package replaybuffer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// refundFixture is a buffer's refund state on a real server: its counter and refund records.
func refundFixture(t *testing.T) (*Buffer, *admission.Counter, jetstream.JetStream, context.Context) {
	t.Helper()
	_, js := bustest.Server(t, "refund-test")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	counter, err := admission.Bind(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketRefunds)
	if err != nil {
		t.Fatal(err)
	}
	b := &Buffer{deps: Deps{Log: zerolog.Nop()}, refundKV: kv, refundErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})}
	return b, counter, js, ctx
}

func refunded(t *testing.T, ctx context.Context, c *admission.Counter) proto.Admission {
	t.Helper()
	a, _, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func record(t *testing.T, ctx context.Context, kv jetstream.KeyValue, group string) proto.GroupRefund {
	t.Helper()
	e, err := kv.Get(ctx, proto.RefundKey(group))
	if err != nil {
		t.Fatal(err)
	}
	var r proto.GroupRefund
	if err := codec.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A pass whose write failed although the server applied it (a lost reply) is found applied, and what it
// gave is not given again; one that the server did not apply is fenced, so it cannot land later, and given
// again as a new pass, its records written again.
func TestRefundPassInDoubtIsResolvedBeforeTheNext(t *testing.T) {
	b, counter, js, ctx := refundFixture(t)
	kv := b.refundKV

	landed := &group{id: "landed", size: 4}
	b.pass = 1
	if !b.recordPass(ctx, refundPass{pass: 1, shares: []refundShare{{g: landed, n: 4}}}) {
		t.Fatal("record not written")
	}
	if err := counter.RefundPass(ctx, 4, 1, 0); err != nil {
		t.Fatal(err)
	}
	b.doubt = &refundPass{pass: 1, shares: []refundShare{{g: landed, n: 4}}}
	if !b.giveBack(ctx, counter, []settled{{g: landed}}) {
		t.Fatal("giveBack after a pass that landed: false")
	}
	if a := refunded(t, ctx, counter); a.Refunded != 4 || a.RefundPass != 1 || landed.refunded != 4 || b.applied != 1 {
		t.Fatalf("counter %+v, group refunded %d, applied %d: want 4 given once, at pass 1", a, landed.refunded, b.applied)
	}

	lost := &group{id: "lost", size: 3}
	b.pass = 2
	if !b.recordPass(ctx, refundPass{pass: 2, shares: []refundShare{{g: lost, n: 3}}}) {
		t.Fatal("record not written")
	}
	b.doubt = &refundPass{pass: 2, shares: []refundShare{{g: lost, n: 3}}}
	_, lostOn, err := counter.Read(ctx) // the revision the lost write was made on
	if err != nil {
		t.Fatal(err)
	}
	if !b.giveBack(ctx, counter, nil) {
		t.Fatal("resolving the lost pass: false")
	}
	// It was fenced: the lost write, landing now on the revision it was made on, is refused.
	admissions, err := js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	late, err := codec.Marshal(proto.Admission{Schema: proto.SchemaVersion, Refunded: 7, RefundPass: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admissions.Update(ctx, proto.KeyAdmission, late, lostOn); !admission.IsConflict(err) {
		t.Fatalf("the lost pass's write landing late: %v, want a compare-and-set conflict", err)
	}
	other := &group{id: "other", size: 2}
	if !b.giveBack(ctx, counter, []settled{{g: other}}) {
		t.Fatal("giveBack after a pass that did not land: false")
	}
	if a := refunded(t, ctx, counter); a.Refunded != 6 || a.RefundPass != 3 || lost.refunded != 0 || other.refunded != 2 {
		t.Fatalf("counter %+v, lost %d, other %d: want the other's 2 given at pass 3, the lost pass's 3 not", a, lost.refunded, other.refunded)
	}
	// Its group's record no longer names pass 2 with 3 pending: pass 3 applied, it would read as given.
	if r := record(t, ctx, kv, "lost"); r.Given(3) != 0 {
		t.Fatalf("record of the lost pass's group %+v reads %d given at pass 3, want 0", r, r.Given(3))
	}
	if !b.giveBack(ctx, counter, []settled{{g: lost}}) {
		t.Fatal("giving the lost pass's group back again: false")
	}
	if a := refunded(t, ctx, counter); a.Refunded != 9 || lost.refunded != 3 {
		t.Fatalf("counter %+v, lost %d: want its 3 given once", a, lost.refunded)
	}
	if r := record(t, ctx, kv, "lost"); r.Given(b.applied) != 3 {
		t.Fatalf("record %+v reads %d given, want 3", r, r.Given(b.applied))
	}

	// A pass another buffer numbered (the counter moved past this buffer's): this one gives nothing back
	// and writes no record from then on, and its run loop stops on passMoved.
	if err := counter.RefundPass(ctx, 1, 9, b.applied); err != nil {
		t.Fatal(err)
	}
	first, second := &group{id: "first", size: 1}, &group{id: "second", size: 1}
	if b.giveBack(ctx, counter, []settled{{g: first}}) {
		t.Fatal("giveBack under another buffer's pass: true")
	}
	var moved *admission.PassMovedError
	if !errors.As(b.passMoved, &moved) || moved.Found != 9 {
		t.Fatalf("passMoved = %v, want the pass 9 found", b.passMoved)
	}
	if b.giveBack(ctx, counter, []settled{{g: second}}) {
		t.Fatal("giveBack after passMoved: true")
	}
	if _, err := kv.Get(ctx, proto.RefundKey("second")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a record written after passMoved: %v", err)
	}
	if a := refunded(t, ctx, counter); a.Refunded != 10 {
		t.Fatalf("counter %+v, want only the other buffer's 1 added", a)
	}
}

// A buffer that takes over reads each record by the pass the counter holds: a record whose pass was applied
// counts what it had pending, one whose pass was not (its buffer died between the record and the refund)
// does not, and is written again without it, so that a later pass does not make it read as applied.
func TestRefundRecordsAreReadByTheAppliedPass(t *testing.T) {
	b, _, _, ctx := refundFixture(t)
	kv := b.refundKV
	put := func(group string, r proto.GroupRefund) {
		t.Helper()
		r.Schema = proto.SchemaVersion
		data, err := codec.Marshal(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, proto.RefundKey(group), data); err != nil {
			t.Fatal(err)
		}
	}
	put("old", proto.GroupRefund{Refunded: 2})
	put("applied", proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 7})
	put("died", proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 8})
	got, err := loadRefunds(ctx, kv, 7, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{proto.RefundKey("old"): 2, proto.RefundKey("applied"): 5, proto.RefundKey("died"): 3}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("loaded %v, want %v", got, want)
		}
	}
	if r := record(t, ctx, kv, "died"); r.Given(100) != 3 {
		t.Fatalf("record of the pass that died %+v reads %d given once later passes are applied, want 3", r, r.Given(100))
	}
}
