package replaybuffer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
)

// A rollout instance killed between its admission claim and its group's start marker leaves the claim in
// the counter: once the instance has been silent for the group timeout, the buffer publishes the marker in
// its stead, the group times out like any whose rollout died, its admissions come back, and the claim is
// removed. A silent instance whose marker is out has its claim removed and no second marker; a beating
// instance's claim is left alone; a claim no rollout could have written is removed.
func TestASilentInstancesLastClaimIsAnnouncedAndGivenBack(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	claim := func(instance, group string) {
		t.Helper()
		c := proto.AdmissionClaim{GroupID: group, Task: "alfworld", GroupSize: 4, RolloutID: "r-" + group, ClaimedAt: time.Now().UnixNano()}
		if ok, err := m.counter.TryClaimAs(testCtx(t), 4, 1000, instance, c); err != nil || !ok {
			t.Fatalf("claim of %s: %v, %v", instance, ok, err)
		}
	}
	claim("lost", "g-lost") // died before its marker
	claim("told", "g-told") // died after it
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStartOf("told"), "start-g-told", mustMarshal(t, start("g-told", 4))); err != nil {
		t.Fatal(err)
	}
	// A claim whose marker's id the stream holds already (here on the older releases' subject, in a message
	// the buffer refuses), so the marker published for it is a duplicate: removed, not announced.
	claim("dup", "g-dup")
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStart, "start-g-dup", []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	claim("alive", "g-alive") // beating, its marker not out yet
	m.beatAs(t, "r-g-alive", "alive")
	// A claim under a key no rollout writes (not a subject token), stored by another writer.
	kv, err := m.js.KeyValue(testCtx(t), proto.BucketAdmission)
	if err != nil {
		t.Fatal(err)
	}
	a, rev, err := m.counter.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	a.Claims["not.a.token"] = proto.AdmissionClaim{GroupID: "g-bad", GroupSize: 4}
	if _, err := kv.Update(testCtx(t), proto.KeyAdmission, mustMarshal(t, a), rev); err != nil {
		t.Fatal(err)
	}
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: 2500 * time.Millisecond, ReplicaTimeout: -1})
	groups, err := m.js.Stream(testCtx(t), proto.StreamGroups)
	if err != nil {
		t.Fatal(err)
	}
	// Looked at every second, but only once silent for the group timeout (from the buffer's start).
	time.Sleep(1500 * time.Millisecond)
	if _, err := groups.GetLastMsgForSubject(testCtx(t), proto.SubjectGroupStartOf("lost")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a marker for the lost claim 1.5s after the buffer started, before the instance was silent for the group timeout: %v", err)
	}
	eventually(t, 30*time.Second, "the silent instances' groups given back, their claims removed", func() bool {
		var err error
		if a, _, err = m.counter.Read(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		_, alive := a.Claims["alive"]
		return a.Refunded == 8 && len(a.Claims) == 1 && alive
	})
	eventually(t, 10*time.Second, "8 missing counted", func() bool { return r.b.Stats().Missing == 8 })
	if st := r.b.Stats(); st.ClaimsAnnounced != 1 || st.ClaimsRemoved != 4 || st.GroupStarts != 2 || st.DeadLettered != 1 {
		t.Errorf("stats %+v: want 1 claim announced, 4 removed, 2 group starts, the message that is not a marker dead-lettered", st)
	}
	msg, err := groups.GetLastMsgForSubject(testCtx(t), proto.SubjectGroupStartOf("lost"))
	if err != nil {
		t.Fatal(err)
	}
	var gs proto.GroupStart
	if err := codec.Unmarshal(msg.Data, &gs); err != nil || gs.GroupID != "g-lost" || gs.GroupSize != 4 || gs.RolloutID != "r-g-lost" || gs.Task != "alfworld" {
		t.Errorf("marker published for the lost claim: %+v, %v; want the claim's group", gs, err)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) != "start-g-lost" {
		t.Errorf("marker's message id %q, want the rollout's own, so a late one of the rollout is a duplicate", msg.Header.Get(jetstream.MsgIDHeader))
	}
	if st, err := groups.Info(testCtx(t)); err != nil || st.State.Msgs != 3 {
		t.Errorf("groups stream: %v, %+v; want three messages (the told marker, the duplicate's first, the marker published for the lost claim)", err, st)
	}
	if _, err := groups.GetLastMsgForSubject(testCtx(t), proto.SubjectGroupStartOf("alive")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a marker for the beating instance: %v", err)
	}
	// Nothing more is given back later: the announced group settled once, the claims are gone.
	time.Sleep(2500 * time.Millisecond)
	if got := m.refunded(t); got != 8 {
		t.Errorf("refunded %d after the claims were settled, want 8", got)
	}
}
