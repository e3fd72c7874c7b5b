package replaybuffer

import (
	"context"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
)

// mark publishes a marker of group on instance's subject, started at at.
func mark(t *testing.T, ctx context.Context, js jetstream.JetStream, instance, group string, at int64) {
	t.Helper()
	data, err := codec.Marshal(proto.GroupStart{Schema: proto.SchemaVersion, GroupID: group, GroupSize: 2, StartedAt: at}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishGroupStart(ctx, js, instance, group, data); err != nil {
		t.Fatal(err)
	}
}

// A silent instance's last claim counts as announced when the buffer knows its group (held, settled, or
// given back by an earlier buffer), or when the last marker on the instance's subject is its group's, or
// a later group's (started at or after the claim: the claim after it failed without landing); a marker
// started before the claim, a marker on another instance's subject, or none at all does not.
func TestAnnouncedReadsTheInstancesLastMarker(t *testing.T) {
	b, _, js, ctx := refundFixture(t)
	b.groups, b.readyIDs, b.released = map[string]*group{}, map[string]*group{}, map[string]struct{}{}
	groups, err := js.Stream(ctx, proto.StreamGroups)
	if err != nil {
		t.Fatal(err)
	}
	mark(t, ctx, js, "i1", "g0", 10)
	mark(t, ctx, js, "i1", "g1", 20)
	mark(t, ctx, js, "i2", "g2", 20)
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectGroupStartOf("i4"), "start-g4", []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	b.groups["held"], b.readyIDs["ready"], b.released["settled"] = &group{}, &group{}, struct{}{}
	b.prior = map[string]priorRefund{proto.RefundKey("recorded"): {given: 2}}
	for _, tc := range []struct {
		instance, group string
		claimedAt       int64
		want            bool
	}{
		{"i1", "g1", 15, true},       // its last marker
		{"i1", "g0", 5, true},        // a later group's marker: this claim's came before it
		{"i1", "g9", 25, false},      // claimed after the last marker: its own never came
		{"i2", "g1", 25, false},      // g1's marker is on another instance's subject, g2's started before
		{"i3", "g9", 0, false},       // an instance that published nothing
		{"i4", "g4", 0, false},       // a message that is not a marker
		{"i3", "held", 99, true},     // groups the buffer knows, whatever the subject holds
		{"i3", "ready", 99, true},    //
		{"i3", "settled", 99, true},  //
		{"i3", "recorded", 99, true}, // given back for by an earlier buffer
	} {
		got, err := b.announced(ctx, groups, tc.instance, proto.AdmissionClaim{GroupID: tc.group, ClaimedAt: tc.claimedAt})
		if err != nil || got != tc.want {
			t.Errorf("announced(%s, %s claimed at %d) = %v, %v; want %v", tc.instance, tc.group, tc.claimedAt, got, err, tc.want)
		}
	}
}

// A held group's refund record is written again, unchanged, once it is older than half the bucket's TTL
// (or of an age not known); a fresh one (written by this buffer, or read as it started), a group without
// one, and any while a refund pass is in doubt are left alone.
func TestHeldGroupsRecordsAreWrittenAgainBeforeTheirTTL(t *testing.T) {
	b, counter, js, ctx := refundFixture(t)
	kv, err := js.KeyValue(ctx, proto.BucketRefunds)
	if err != nil {
		t.Fatal(err)
	}
	rev := func(g string) uint64 {
		t.Helper()
		e, err := kv.Get(ctx, proto.RefundKey(g))
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	old, fresh, none := &group{id: "old", size: 4}, &group{id: "fresh", size: 4}, &group{id: "none", size: 4}
	want := proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: 3, Pending: 1, Pass: 7}
	for _, g := range []*group{old, fresh} {
		if err := b.writeRecord(ctx, counter, g, want); err != nil {
			t.Fatal(err)
		}
	}
	// A record an earlier buffer wrote, which this one read as it started.
	if err := b.writeRecord(ctx, counter, &group{id: "recovered"}, proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.writeRecord(ctx, counter, &group{id: "recent"}, proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: 1}); err != nil {
		t.Fatal(err)
	}
	recovered, recent := &group{id: "recovered", size: 4}, &group{id: "recent", size: 4}
	b.prior = map[string]priorRefund{proto.RefundKey("recovered"): {given: 2, rev: rev("recovered")},
		proto.RefundKey("recent"): {given: 1, rev: rev("recent"), at: time.Now()}}
	b.recoverRefund(recovered)
	b.recoverRefund(recent)
	now := time.Now()
	old.recordAt = now.Add(-recordRefreshAge - time.Second)
	b.groups = map[string]*group{"old": old, "none": none}
	b.ready = []*group{fresh, recent}
	b.unsettled = []settled{{g: recovered}}
	before := map[string]uint64{"old": rev("old"), "fresh": rev("fresh"), "recovered": rev("recovered"), "recent": rev("recent")}

	b.doubt = &refundPass{pass: 8}
	b.refreshRecords(ctx, counter, now)
	if rev("old") != before["old"] {
		t.Fatal("a record written again while a refund pass is in doubt")
	}
	b.doubt = nil
	b.refreshRecords(ctx, counter, now)
	if rev("old") == before["old"] || rev("recovered") == before["recovered"] || rev("fresh") != before["fresh"] || rev("recent") != before["recent"] {
		t.Errorf("revisions old %d, recovered %d, fresh %d, recent %d after %v: want the old record and the one of unknown age written again, the fresh ones not",
			rev("old"), rev("recovered"), rev("fresh"), rev("recent"), before)
	}
	if r := record(t, ctx, kv, "old"); r != want {
		t.Errorf("old record written again as %+v, want it unchanged: %+v", r, want)
	}
	if r := record(t, ctx, kv, "recovered"); r.Refunded != 2 || r.Pending != 0 || r.Pass != 0 {
		t.Errorf("recovered record written again as %+v, want what it read as: 2 given", r)
	}
	if _, err := kv.Get(ctx, proto.RefundKey("none")); err == nil {
		t.Error("a record written for a group that had none")
	}
	if st := b.Stats(); st.RefundRecordsRefreshed != 2 || st.RefundRecordRefreshErrors != 0 {
		t.Errorf("stats %+v: want 2 records refreshed, no error", st)
	}
	// Once written, a record is fresh again.
	again := rev("old")
	b.refreshRecords(ctx, counter, time.Now())
	if rev("old") != again {
		t.Error("a record just written was written again")
	}
}

// An instance is silent once it has gone without a heartbeat for the time given, counted from its last
// heartbeat or, if it was not heard since, from when the buffer began to hear (its start, or its
// connection's return): heartbeats sent while it could not hear say nothing.
func TestSilentForCountsFromWhenTheBufferCouldHear(t *testing.T) {
	var l liveness
	t0 := time.Now()
	l.beat(proto.RolloutHeartbeat{RolloutID: "r", Instance: "heard"}, t0)
	for _, tc := range []struct {
		instance   string
		since, now time.Time
		want       bool
	}{
		{"heard", t0.Add(-time.Minute), t0.Add(59 * time.Second), false},
		{"heard", t0.Add(-time.Minute), t0.Add(61 * time.Second), true},
		{"never", t0, t0.Add(59 * time.Second), false}, // not heard: counted from since
		{"never", t0, t0.Add(61 * time.Second), true},
		{"heard", t0.Add(30 * time.Second), t0.Add(61 * time.Second), false}, // the buffer could not hear before since
		{"heard", t0.Add(30 * time.Second), t0.Add(91 * time.Second), true},
	} {
		if got := l.silentFor(tc.instance, tc.now, tc.since, time.Minute); got != tc.want {
			t.Errorf("silentFor(%s, since +%v, at +%v) = %v, want %v", tc.instance, tc.since.Sub(t0), tc.now.Sub(t0), got, tc.want)
		}
	}
	l.pruneInstances(t0.Add(2*time.Minute), time.Minute)
	if got := l.silentFor("heard", t0.Add(2*time.Minute), t0.Add(90*time.Second), time.Minute); got {
		t.Error("a pruned instance counted silent before the time given had passed since the buffer began to hear")
	}
}

// A claim older than the oldest marker a groups stream that has dropped messages keeps may have had its
// marker removed: it cannot be told announced, and is not announced again.
func TestMarkerGoneOnceTheStreamDroppedMarkersAfterTheClaim(t *testing.T) {
	_, _, js, ctx := refundFixture(t)
	groups, err := js.Stream(ctx, proto.StreamGroups)
	if err != nil {
		t.Fatal(err)
	}
	gone := func(claimedAt int64) bool {
		t.Helper()
		g, err := markerGone(ctx, groups, proto.AdmissionClaim{GroupID: "g", ClaimedAt: claimedAt})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	long := time.Now().Add(-time.Hour).UnixNano()
	if gone(long) {
		t.Error("an empty stream that never dropped a marker said a claim's marker may be gone")
	}
	mark(t, ctx, js, "i1", "g1", time.Now().UnixNano())
	if gone(long) {
		t.Error("a stream that never dropped a marker said a claim's marker may be gone")
	}
	if err := groups.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if !gone(long) || !gone(time.Now().UnixNano()) {
		t.Error("a purged stream: want any claim's marker possibly gone")
	}
	mark(t, ctx, js, "i1", "g2", time.Now().UnixNano())
	if !gone(long) || gone(time.Now().Add(time.Hour).UnixNano()) {
		t.Error("want a claim older than the oldest marker kept possibly gone, a younger one not")
	}
}
