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
	if !b.recordPass(ctx, counter, refundPass{pass: 1, shares: []refundShare{{g: landed, n: 4}}}) {
		t.Fatal("record not written")
	}
	if err := counter.RefundPass(ctx, 4, 1, 0, ""); err != nil {
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
	if !b.recordPass(ctx, counter, refundPass{pass: 2, shares: []refundShare{{g: lost, n: 3}}}) {
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
	if a := refunded(t, ctx, counter); a.Refunded != 6 || a.RefundPass != 2 || lost.refunded != 0 || other.refunded != 2 {
		t.Fatalf("counter %+v, lost %d, other %d: want the other's 2 given at pass 2, numbered again, the lost pass's 3 not", a, lost.refunded, other.refunded)
	}
	// Its group's record no longer names pass 2 with 3 pending: pass 2 applied, it would read as given.
	if r := record(t, ctx, kv, "lost"); r.Given(2, nil) != 0 {
		t.Fatalf("record of the lost pass's group %+v reads %d given at pass 2, want 0", r, r.Given(2, nil))
	}
	if !b.giveBack(ctx, counter, []settled{{g: lost}}) {
		t.Fatal("giving the lost pass's group back again: false")
	}
	if a := refunded(t, ctx, counter); a.Refunded != 9 || lost.refunded != 3 {
		t.Fatalf("counter %+v, lost %d: want its 3 given once", a, lost.refunded)
	}
	if r := record(t, ctx, kv, "lost"); r.Given(b.applied, nil) != 3 {
		t.Fatalf("record %+v reads %d given, want 3", r, r.Given(b.applied, nil))
	}

	// A pass another buffer numbered (the counter moved past this buffer's): this one gives nothing back
	// and writes no record from then on, and its run loop stops on passMoved.
	if err := counter.RefundPass(ctx, 1, 9, b.applied, ""); err != nil {
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
	put := func(group string, r proto.GroupRefund) uint64 {
		t.Helper()
		r.Schema = proto.SchemaVersion
		data, err := codec.Marshal(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(ctx, proto.RefundKey(group), data)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("old", proto.GroupRefund{Refunded: 2})
	put("applied", proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 7})
	put("died", proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 8})
	got, err := loadRefunds(ctx, kv, 7, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{proto.RefundKey("old"): 2, proto.RefundKey("applied"): 5, proto.RefundKey("died"): 3}
	for k, v := range want {
		if got[k].given != v {
			t.Fatalf("loaded %v, want given %v", got, want)
		}
	}
	if r := record(t, ctx, kv, "died"); r.Given(100, nil) != 3 {
		t.Fatalf("record of the pass that died %+v reads %d given once later passes are applied, want 3", r, r.Given(100, nil))
	}

	// A record read at a revision since written over (here by the buffer before, still writing) is read
	// again and settled by what it holds now; one since gone is left out.
	first := put("moved", proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 8})
	put("moved", proto.GroupRefund{Refunded: 9, Pending: 4, Pass: 8})
	p, ok, err := settleRecord(ctx, kv, proto.RefundKey("moved"), proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 8}, first, time.Time{}, 7, nil, zerolog.Nop())
	if err != nil || !ok || p.given != 5 {
		t.Fatalf("settled %+v, %v, %v; want 5 given (9 less the 4 pending of the record written since)", p, ok, err)
	}
	if r := record(t, ctx, kv, "moved"); r.Pass != 0 || r.Refunded != 5 {
		t.Fatalf("record %+v, want 5 given, without its dead pass", r)
	}
	if err := kv.Delete(ctx, proto.RefundKey("moved")); err != nil {
		t.Fatal(err)
	}
	if p, ok, err := settleRecord(ctx, kv, proto.RefundKey("moved"), proto.GroupRefund{Refunded: 5, Pending: 2, Pass: 8}, first, time.Time{}, 7, nil, zerolog.Nop()); err != nil || ok {
		t.Fatalf("settled a record since deleted: %+v, %v, %v; want it left out", p, ok, err)
	}
}

// After another buffer starts, the one before it (still running: its lease lapsed unseen) can apply no
// refund, not even one it numbered with the pass the counter holds, nor take a pass in doubt for applied,
// nor write over a record the new owner wrote; the pass it may have numbered and recorded last is dead, so
// its records read as not applied, also when they reach the server after the new owner read the records;
// and the new owner writes over such a record when it meets its group.
func TestARefundPassOfTheBufferBeforeIsDeadOnceAnotherStarts(t *testing.T) {
	old, counter, _, ctx := refundFixture(t)
	kv := old.refundKV
	start := func(b *Buffer, owner string) {
		t.Helper()
		a, err := counter.FenceHeld(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		b.applied, b.owner = a.RefundPass, owner
		if b.prior, err = loadRefunds(ctx, kv, a.RefundPass, a.DeadPasses, zerolog.Nop()); err != nil {
			t.Fatal(err)
		}
	}
	eps := func(n int) []proto.Episode { return make([]proto.Episode, n) }
	start(old, "old/1")
	given, shared := &group{id: "given", size: 2}, &group{id: "shared", size: 4}
	if !old.giveBack(ctx, counter, []settled{{g: given}, {g: shared, ok: eps(3)}}) {
		t.Fatal("giveBack of the first owner: false")
	}
	next := &Buffer{deps: old.deps, refundKV: kv, refundErrors: old.refundErrors}
	start(next, "next/1")
	held := next.applied

	// A pass in doubt of the buffer before, the same number as the pass held now, is not taken for applied.
	inDoubt := &Buffer{deps: old.deps, refundKV: kv, refundErrors: old.refundErrors, applied: held - 1, owner: "old/1"}
	doubted := &group{id: "doubted", size: 1}
	inDoubt.doubt = &refundPass{pass: held, shares: []refundShare{{g: doubted, n: 1}}}
	var moved *admission.PassMovedError
	if inDoubt.giveBack(ctx, counter, nil) || doubted.refunded != 0 || !errors.As(inDoubt.passMoved, &moved) || !moved.Taken || moved.Found != held {
		t.Fatalf("a pass in doubt of the former owner: refunded %d, passMoved %v; want nothing applied, the counter taken at pass %d", doubted.refunded, inDoubt.passMoved, held)
	}

	// The new owner gives back for a group the buffer before had given for (its record read at the start).
	nextShared := &group{id: "shared", size: 4}
	next.recoverRefund(nextShared)
	if !next.giveBack(ctx, counter, []settled{{g: nextShared, ok: eps(2)}}) || nextShared.refunded != 2 || next.applied != held+1 {
		t.Fatalf("giveBack of the new owner: refunded %d at pass %d, want 2 at pass %d", nextShared.refunded, next.applied, held+1)
	}

	// The buffer before numbers the pass held at the other's start and writes records: those of groups
	// without one are stored, the one over the new owner's record is refused, and so is the refund.
	late, orphan := &group{id: "late", size: 3}, &group{id: "orphan", size: 1}
	if old.giveBack(ctx, counter, []settled{{g: late}, {g: orphan}, {g: shared, ok: eps(2)}}) {
		t.Fatal("giveBack of the former owner: true")
	}
	if !errors.As(old.passMoved, &moved) || !moved.Taken {
		t.Fatalf("passMoved = %v, want the counter taken", old.passMoved)
	}
	if r := record(t, ctx, kv, "late"); r.Pass != held || r.Pending != 3 {
		t.Fatalf("the former owner's record %+v, want pass %d with 3 pending", r, held)
	}
	if r := record(t, ctx, kv, "shared"); r.Pass != held+1 || r.Refunded != 2 {
		t.Fatalf("record of the shared group %+v, want the new owner's: 2 given at pass %d", r, held+1)
	}
	if a := refunded(t, ctx, counter); a.Refunded != 4 || a.RefundOwner != "next/1" {
		t.Fatalf("counter %+v, want 3 given by the first owner and 1 by the next, owned by next/1", a)
	}

	// The new owner meets the late record's group: it writes over the record.
	nextLate := &group{id: "late", size: 3}
	next.recoverRefund(nextLate) // not among the records it read
	if !next.giveBack(ctx, counter, []settled{{g: nextLate}}) || nextLate.refunded != 3 || next.passMoved != nil {
		t.Fatalf("giveBack of the new owner over the late record: refunded %d, passMoved %v; want 3 given", nextLate.refunded, next.passMoved)
	}
	if n := next.Stats().RefundRecordConflicts; n != 1 {
		t.Fatalf("refund_record_conflicts %d, want 1 (the late record written over)", n)
	}

	// A buffer starting later reads every record right: the orphan's dead pass as not applied.
	third := &Buffer{deps: old.deps, refundKV: kv, refundErrors: old.refundErrors}
	start(third, "third/1")
	want := map[string]int{"given": 2, "shared": 2, "late": 3, "orphan": 0}
	for g, n := range want {
		if p, ok := third.prior[proto.RefundKey(g)]; !ok || p.given != n {
			t.Fatalf("records read by a third buffer %v, want given %v", third.prior, want)
		}
	}
	if r := record(t, ctx, kv, "orphan"); r.Pass != 0 || r.Given(third.applied+100, nil) != 0 {
		t.Fatalf("the orphan record after the load %+v, want it written again without its dead pass", r)
	}
	if a := refunded(t, ctx, counter); a.Refunded != 7 {
		t.Fatalf("counter %+v, want 7 given in all", a)
	}
}
