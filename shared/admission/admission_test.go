package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var testCtx = bustest.Ctx

var eventually = bustest.Eventually

// mesh starts an embedded server with the mesh's topology and returns a function that opens a counter on
// a connection of its own (as every rollout replica and the replay-buffer have).
func mesh(t *testing.T) func() (*admission.Counter, jetstream.JetStream) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	open := func() (*admission.Counter, jetstream.JetStream) {
		t.Helper()
		ctx := testCtx(t)
		nc, err := bus.Connect(ctx, srv.URL(), "admission-test", zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := bus.JetStream(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.EnsureTopology(ctx, js, 1); err != nil {
			t.Fatal(err)
		}
		c, err := admission.Bind(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		return c, js
	}
	return open
}

func read(t *testing.T, c *admission.Counter) proto.Admission {
	t.Helper()
	a, _, err := c.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReadBeforeAnyClaim(t *testing.T) {
	c, _ := mesh(t)()
	a, rev, err := c.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if rev != 0 || a.Started != 0 || a.Refunded != 0 || a.Schema != proto.SchemaVersion {
		t.Fatalf("Read = %+v rev %d, want zero counter at revision 0", a, rev)
	}
}

func TestClaimAndRefund(t *testing.T) {
	c, _ := mesh(t)()
	ctx := testCtx(t)
	type op struct {
		claim, refund int64
		limit         int64
	}
	steps := []struct {
		given            op
		expectedOK       bool
		expectedStarted  int64
		expectedRefunded int64
	}{
		{op{claim: 8, limit: 8}, true, 8, 0},
		{op{claim: 1, limit: 8}, false, 8, 0},
		{op{refund: 3}, true, 8, 3},
		{op{claim: 4, limit: 8}, false, 8, 3},
		{op{claim: 3, limit: 8}, true, 11, 3},
		{op{claim: 1, limit: 8}, false, 11, 3},
		{op{claim: 8, limit: 16}, true, 19, 3},
		{op{claim: 1, limit: 16}, false, 19, 3},
	}
	for i, s := range steps {
		ok := true
		var err error
		if s.given.refund > 0 {
			err = c.Refund(ctx, s.given.refund)
		} else {
			ok, err = c.TryClaim(ctx, s.given.claim, s.given.limit)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		a := read(t, c)
		if ok != s.expectedOK || a.Started != s.expectedStarted || a.Refunded != s.expectedRefunded {
			t.Fatalf("step %d %+v: ok %v, counter %+v; want ok %v started %d refunded %d",
				i, s.given, ok, a, s.expectedOK, s.expectedStarted, s.expectedRefunded)
		}
	}
}

// Writers on separate connections race on the one key; compare-and-set keeps every claim within the limit
// and loses no refund.
func TestRacingWritersNeverOvershoot(t *testing.T) {
	open := mesh(t)
	const writers, limit = 4, 40
	counters := make([]*admission.Counter, writers)
	for i := range counters {
		counters[i], _ = open()
	}
	ctx := testCtx(t)
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range counters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ok, err := c.TryClaim(ctx, 1, limit)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					return
				}
				claimed.Add(1)
			}
		}()
	}
	wg.Wait()
	a := read(t, counters[0])
	if claimed.Load() != limit || a.Started != limit {
		t.Fatalf("claimed %d, counter started %d; want exactly %d", claimed.Load(), a.Started, limit)
	}

	// Refunds and claims at once: every refund lands, and claims never pass the limit.
	claimed.Store(0)
	var refunds sync.WaitGroup
	for _, c := range counters[:2] {
		refunds.Add(1)
		go func() {
			defer refunds.Done()
			for range 10 {
				if err := c.Refund(ctx, 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for _, c := range counters[2:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for claimed.Load() < 20 && time.Now().Before(deadline) {
				ok, err := c.TryClaim(ctx, 1, limit)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					claimed.Add(1)
				}
			}
		}()
	}
	refunds.Wait()
	wg.Wait()
	a = read(t, counters[0])
	if a.Refunded != 20 {
		t.Fatalf("refunded %d, want 20", a.Refunded)
	}
	if a.Started != limit+claimed.Load() || a.Started-a.Refunded > limit {
		t.Fatalf("counter %+v after %d more claims: outstanding %d over limit %d", a, claimed.Load(), a.Started-a.Refunded, limit)
	}
	if claimed.Load() != 20 {
		t.Fatalf("claimed %d after 20 refunds, want 20", claimed.Load())
	}
}

// bare starts an embedded server without the mesh's topology and returns a JetStream context on it.
func bare(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := bus.Connect(testCtx(t), srv.URL(), "admission-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestBindWithoutBucket(t *testing.T) {
	js := bare(t)
	if _, err := admission.Bind(testCtx(t), js); err == nil {
		t.Fatal("Bind without the admission bucket succeeded")
	}
}

func TestCorruptCounterIsAnError(t *testing.T) {
	c, js := mesh(t)()
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, proto.KeyAdmission, []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryClaim(ctx, 1, 8); !errors.Is(err, proto.ErrMalformed) {
		t.Fatalf("TryClaim on a corrupt counter: %v, want ErrMalformed", err)
	}
	if err := c.Refund(ctx, 1); !errors.Is(err, proto.ErrMalformed) {
		t.Fatalf("Refund on a corrupt counter: %v, want ErrMalformed", err)
	}
}

// The closed mark only rises (a value that does not decode is written over), and a watcher sees it as it is and as it changes; a value that does not
// decode is reported and skipped.
func TestClosedMark(t *testing.T) {
	open := mesh(t)
	c, js := open()
	watcher, _ := open()
	ctx := testCtx(t)
	if err := c.Close(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	var bad atomic.Int32
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- watcher.WatchClosed(wctx, func(b int64) { seen.Store(b) }, func(error) { bad.Add(1) })
	}()
	eventually(t, 5*time.Second, "the mark as it was", func() bool { return seen.Load() == 3 })
	for _, below := range []int64{2, 3, 5} {
		if err := c.Close(ctx, below); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the raised mark", func() bool { return seen.Load() == 5 })
	kv, err := js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, proto.KeyAdmissionClosed)
	if err != nil {
		t.Fatal(err)
	}
	var m proto.AdmissionClosed
	if err := codec.Unmarshal(e.Value(), &m); err != nil || m.Below != 5 || m.Schema != proto.SchemaVersion {
		t.Fatalf("stored mark %+v (%v), want 5: lower marks leave it", m, err)
	}
	if _, err := kv.Put(ctx, proto.KeyAdmissionClosed, []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the bad value reported", func() bool { return bad.Load() == 1 })
	if err := c.Close(ctx, 4); err != nil {
		t.Fatalf("Close over a value that does not decode: %v", err)
	}
	eventually(t, 5*time.Second, "the mark written over the bad value", func() bool { return seen.Load() == 4 })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("WatchClosed returned %v after its context ended", err)
	}
}

// A claim whose write fails (here the bucket refuses values that large) may or may not have been applied
// as far as the caller can tell: the error says so, while a read that fails, before anything is written,
// does not.
func TestFailedClaimWriteIsUncertain(t *testing.T) {
	js := bare(t)
	if _, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: proto.BucketAdmission, MaxValueSize: 4}); err != nil {
		t.Fatal(err)
	}
	c, err := admission.Bind(testCtx(t), js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryClaim(testCtx(t), 8, 64); !errors.Is(err, admission.ErrClaimUncertain) {
		t.Fatalf("TryClaim with a failing write: %v, want ErrClaimUncertain", err)
	}
	if err := js.DeleteKeyValue(testCtx(t), proto.BucketAdmission); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryClaim(testCtx(t), 8, 64); err == nil || errors.Is(err, admission.ErrClaimUncertain) {
		t.Fatalf("TryClaim with a failing read: %v, want an error that is not ErrClaimUncertain", err)
	}
}

// A refused batch is dead-lettered and its admissions are given back once, however often it comes again
// (a delivery whose termination was lost).
func TestRefuseBatchGivesAdmissionsBackOnce(t *testing.T) {
	c, js := mesh(t)()
	ctx := testCtx(t)
	if ok, err := c.TryClaim(ctx, 10, 100); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REFUSE_TEST", Subjects: []string{"refuse.test"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "refuse.test", []byte("a batch of 4")); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "REFUSE_TEST", jetstream.ConsumerConfig{Durable: "refuse", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := <-msgs.Messages()
	if m == nil {
		t.Fatalf("no message fetched: %v", msgs.Error())
	}
	reason := errors.New("advantages do not decode")
	for i, want := range []int64{4, 0} {
		refunded, err := admission.RefuseBatch(ctx, js, c, "refuse-test", m, reason, 4, zerolog.Nop())
		if err != nil || refunded != want {
			t.Fatalf("delivery %d: refunded %d, err %v; want %d, nil", i+1, refunded, err, want)
		}
		if got := read(t, c).Refunded; got != 4 {
			t.Fatalf("delivery %d: counter refunded %d, want 4", i+1, got)
		}
	}
	dl, err := js.Stream(ctx, proto.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := dl.GetLastMsgForSubject(ctx, proto.SubjectDeadLetterPrefix+"refuse-test")
	if err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	if got := stored.Header.Get(proto.HeaderDeadLetterReason); got != reason.Error() {
		t.Fatalf("dead letter reason %q, want %q", got, reason)
	}
}

// A numbered refund stores its pass with it; one expecting another pass is refused, and so is a write made
// on a revision a fence has passed. Other writers keep the pass.
func TestRefundPassIsStoredAndFenced(t *testing.T) {
	c, _ := mesh(t)()
	ctx := testCtx(t)
	if err := c.RefundPass(ctx, 3, 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	if a := read(t, c); a.Refunded != 3 || a.RefundPass != 1 {
		t.Fatalf("after pass 1: %+v, want 3 refunded at pass 1", a)
	}
	var moved *admission.PassMovedError
	if err := c.RefundPass(ctx, 2, 2, 0, ""); !errors.As(err, &moved) || moved.Found != 1 {
		t.Fatalf("pass 2 expecting pass 0: %v, want PassMovedError finding 1", err)
	}
	if err := c.Fence(ctx, 0, ""); !errors.As(err, &moved) {
		t.Fatalf("fence expecting pass 0: %v, want PassMovedError", err)
	}
	_, before, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	a, after, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after == before || a.Refunded != 3 || a.RefundPass != 1 {
		t.Fatalf("fence: revision %d → %d, counter %+v; want a new revision, the counter unchanged", before, after, a)
	}
	// A counter showing an older pass than expected is read again (a lagging replica's answer), and when it
	// stays older the call fails as a stale read, to be made again later: passes only rise, so it is not a
	// moved pass.
	if err := c.RefundPass(ctx, 1, 6, 5, ""); !errors.Is(err, admission.ErrStaleRead) || errors.As(err, &moved) {
		t.Fatalf("pass 6 expecting 5 on a counter at 1: %v, want ErrStaleRead", err)
	}
	if a := read(t, c); a.Refunded != 3 || a.RefundPass != 1 {
		t.Fatalf("after a refused pass: %+v, want it unchanged", a)
	}
	_, before, err = c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A buffer that starts owns the counter from then on: the pass after the one held is dead, and held.
	held, err := c.FenceHeld(ctx, "b/1")
	if err != nil || held.RefundPass != 2 || !slices.Equal(held.DeadPasses, []uint64{2}) || held.RefundOwner != "b/1" {
		t.Fatalf("FenceHeld = %+v, %v; want pass 2 held and dead, owned by b/1", held, err)
	}
	if a, after, err := c.Read(ctx); err != nil || after == before || a.RefundPass != 2 || a.Refunded != 3 || a.RefundOwner != "b/1" {
		t.Fatalf("FenceHeld: revision %d → %d, counter %+v, %v; want a new revision, pass 2 owned by b/1, nothing refunded", before, after, a, err)
	}
	// The owner before it can neither give back nor fence, even at the pass held (it numbered pass 2 too).
	if err := c.RefundPass(ctx, 1, 3, 2, ""); !errors.As(err, &moved) || !moved.Taken {
		t.Fatalf("pass 3 of the former owner: %v, want PassMovedError taken", err)
	}
	if err := c.Fence(ctx, 2, ""); !errors.As(err, &moved) || !moved.Taken || moved.Found != 2 {
		t.Fatalf("fence of the former owner: %v, want PassMovedError taken at pass 2", err)
	}
	if err := c.RefundPass(ctx, 2, 3, 2, "b/1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.TryClaim(ctx, 5, 100); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if err := c.Refund(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if a := read(t, c); a.Started != 5 || a.Refunded != 6 || a.RefundPass != 3 || a.RefundOwner != "b/1" || !slices.Equal(a.DeadPasses, []uint64{2}) {
		t.Fatalf("after a claim and a plain refund: %+v, want the pass, owner and dead passes kept", a)
	}
	// Only the last MaxDeadPasses starts' dead passes are kept.
	for i := range proto.MaxDeadPasses + 2 {
		if _, err := c.FenceHeld(ctx, fmt.Sprintf("b/%d", i+2)); err != nil {
			t.Fatal(err)
		}
	}
	a = read(t, c)
	if len(a.DeadPasses) != proto.MaxDeadPasses || a.DeadPasses[0] != 6 || a.DeadPasses[proto.MaxDeadPasses-1] != a.RefundPass || a.RefundPass != 3+proto.MaxDeadPasses+2 {
		t.Fatalf("after %d more starts: %+v, want the last %d dead passes, ending at the pass held", proto.MaxDeadPasses+2, a, proto.MaxDeadPasses)
	}
}

// A counter made anew after its owner started (its bucket lost and created again: no owner, no pass) is
// adopted by the owner's next fence or refund at the pass it expects; one another buffer owns is not.
func TestACounterMadeAnewIsAdoptedByItsOwner(t *testing.T) {
	c, js := mesh(t)()
	ctx := testCtx(t)
	held, err := c.FenceHeld(ctx, "b/1")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, proto.KeyAdmission); err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(ctx, held.RefundPass, "b/1"); err != nil {
		t.Fatalf("fence of the counter made anew: %v, want it adopted", err)
	}
	if err := c.RefundPass(ctx, 2, held.RefundPass+1, held.RefundPass, "b/1"); err != nil {
		t.Fatalf("refund on the counter made anew: %v", err)
	}
	if a := read(t, c); a.Refunded != 2 || a.RefundPass != held.RefundPass+1 || a.RefundOwner != "b/1" {
		t.Fatalf("counter %+v, want 2 refunded at pass %d, owned by b/1", a, held.RefundPass+1)
	}
	var moved *admission.PassMovedError
	if err := c.Fence(ctx, held.RefundPass+1, "c/1"); !errors.As(err, &moved) || !moved.Taken {
		t.Fatalf("fence by another: %v, want PassMovedError taken", err)
	}
	// A counter last written by a service of an older release (which drops the owner and the dead passes
	// it does not know) is adopted too, at the pass expected.
	b, err := codec.Marshal(proto.Admission{Schema: proto.SchemaVersion, Started: 9, Refunded: 2, RefundPass: held.RefundPass + 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, proto.KeyAdmission, b); err != nil {
		t.Fatal(err)
	}
	// A buffer whose lease lapsed, expecting an earlier pass, does not adopt it: the pass never goes down.
	if err := c.Fence(ctx, held.RefundPass, "a/1"); !errors.As(err, &moved) || moved.Taken || moved.Found != held.RefundPass+1 {
		t.Fatalf("fence expecting an earlier pass on a counter an older release wrote: %v, want PassMovedError finding pass %d", err, held.RefundPass+1)
	}
	if err := c.RefundPass(ctx, 1, held.RefundPass+2, held.RefundPass+1, "b/1"); err != nil {
		t.Fatalf("refund on a counter an older release wrote: %v", err)
	}
	if a := read(t, c); a.Refunded != 3 || a.RefundOwner != "b/1" || a.Started != 9 || a.RefundPass != held.RefundPass+2 {
		t.Fatalf("counter %+v, want 3 refunded at pass %d, owned by b/1, the claims kept", a, held.RefundPass+2)
	}
}

// A claim made as a rollout instance stores it as that instance's last claim in the claim's own write;
// every other write keeps the claims; DropClaim removes an instance's claim only if it is the claim given
// (whatever it is when none is).
func TestClaimsAreKeptByInstanceUntilDropped(t *testing.T) {
	c, _ := mesh(t)()
	ctx := testCtx(t)
	claim := func(instance, group string, limit int64) bool {
		t.Helper()
		ok, err := c.TryClaimAs(ctx, 2, limit, instance, proto.AdmissionClaim{GroupID: group, GroupSize: 2, RolloutID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !claim("i1", "g1", 10) || !claim("i2", "g2", 10) || !claim("i1", "g3", 10) {
		t.Fatal("claims under the limit refused")
	}
	if claim("i2", "g4", 6) {
		t.Fatal("a claim over the limit admitted")
	}
	a := read(t, c)
	if a.Started != 6 || len(a.Claims) != 2 || a.Claims["i1"].GroupID != "g3" || a.Claims["i2"].GroupID != "g2" {
		t.Fatalf("counter %+v: want 6 started, i1's last claim g3, i2's g2 (the refused claim stores nothing)", a)
	}
	// Refunds, passes and fences keep them.
	if err := c.Refund(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FenceHeld(ctx, "owner"); err != nil {
		t.Fatal(err)
	}
	if err := c.RefundPass(ctx, 1, 2, 1, "owner"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.TryClaim(ctx, 1, 100); err != nil || !ok {
		t.Fatalf("a claim without an instance: %v, %v", ok, err)
	}
	if a := read(t, c); len(a.Claims) != 2 || a.Claims["i1"].GroupID != "g3" || a.Refunded != 2 || a.Started != 7 {
		t.Fatalf("counter %+v after refunds, a fence and a claim without an instance: want both claims kept", a)
	}
	g1, g3, g3later := a.Claims["i1"], a.Claims["i1"], a.Claims["i1"]
	g1.GroupID = "g1"
	g3later.ClaimedAt++
	for _, tc := range []struct {
		instance string
		claim    *proto.AdmissionClaim
		removed  bool
		left     int
	}{
		{"i1", &g1, false, 2},      // an earlier claim of i1: its last is g3
		{"i1", &g3later, false, 2}, // a claim of g3 made at another time
		{"i9", nil, false, 2},      // no claim
		{"i1", &g3, true, 1},
		{"i2", nil, true, 0}, // whatever it is
	} {
		removed, err := c.DropClaim(ctx, tc.instance, tc.claim)
		if a := read(t, c); err != nil || removed != tc.removed || len(a.Claims) != tc.left {
			t.Errorf("DropClaim(%s, %+v) = %v, %v, claims left %v; want %v, %d left", tc.instance, tc.claim, removed, err, a.Claims, tc.removed, tc.left)
		}
	}
	if _, err := c.TryClaimAs(ctx, 1, 100, "a.b", proto.AdmissionClaim{GroupID: "g"}); err == nil {
		t.Error("a claim under an instance that is not a subject token was stored")
	}
}
