package replaybuffer_test

import (
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/bus"
)

// announce publishes a group's start marker, as rollout does before the group's episodes start.
func (m *mesh) announce(t *testing.T, gs proto.GroupStart) {
	t.Helper()
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStart, "start-"+gs.GroupID, mustMarshal(t, gs)); err != nil {
		t.Fatal(err)
	}
}

// markersPending is how many group-start markers the buffer holds without having acked them.
func (m *mesh) markersPending(t *testing.T) int {
	t.Helper()
	return m.backlog(t, proto.StreamGroups, proto.ConsumerReplayBufferGroups)
}

func start(g string, size int) proto.GroupStart {
	return proto.GroupStart{Schema: proto.SchemaVersion, GroupID: g, Task: "alfworld", GroupSize: size, RolloutID: "r1"}
}

// A group whose rollout died before publishing any member is known only by its marker: it times out and
// all its admissions are refunded, so the staleness gate gets its room back.
func TestGroupThatNeverPublishedIsRefundedAfterTimeout(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: time.Second})
	began := time.Now()
	m.announce(t, start("dead", 8))
	eventually(t, 10*time.Second, "the group's 8 admissions refunded", func() bool { return m.refunded(t) == 8 })
	if waited := time.Since(began); waited < time.Second {
		t.Fatalf("refunded after %v, before the 1s group timeout", waited)
	}
	// The buffer counts a settled group's losses just after refunding them.
	eventually(t, 10*time.Second, "8 missing counted", func() bool { return r.b.Stats().Missing == 8 })
	if st := r.b.Stats(); st.GroupStarts != 1 || st.Batches != 0 {
		t.Fatalf("stats %+v: want 1 group start, no batch", st)
	}
	eventually(t, 10*time.Second, "the marker acked", func() bool { return m.markersPending(t) == 0 })
}

// A group with a marker trains as any other; its marker is acked with its members, and nothing is refunded.
func TestAnnouncedGroupTrainsAndAcksItsMarker(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	m.announce(t, start("g1", 2))
	eventually(t, 10*time.Second, "the marker read", func() bool { return r.b.Stats().GroupStarts == 1 })
	if n := m.markersPending(t); n != 1 {
		t.Fatalf("%d markers pending before the group completed, want 1 (held with the group)", n)
	}
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	eventually(t, 10*time.Second, "members and marker acked", func() bool { return m.pending(t) == 0 && m.markersPending(t) == 0 })
	// A marker read after its group was settled (a redelivery) is acked and opens nothing.
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStart, "start-g1-again", mustMarshal(t, start("g1", 2))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the late marker acked", func() bool { return m.markersPending(t) == 0 })
	time.Sleep(1500 * time.Millisecond)
	if got := m.refunded(t); got != 0 {
		t.Fatalf("refunded %d, want 0", got)
	}
	if st := r.b.Stats(); st.GroupStarts != 1 || st.Missing != 0 {
		t.Fatalf("stats %+v: want 1 group start and nothing missing", st)
	}
}

// The marker is held unacked with its group, so a buffer that restarts still times the group out.
func TestMarkerSurvivesBufferRestart(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	c := replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: 2 * time.Second}
	r := m.startBuffer(t, c)
	m.announce(t, start("dead", 4))
	eventually(t, 10*time.Second, "the marker read", func() bool { return r.b.Stats().GroupStarts == 1 })
	r.stop()
	r2 := m.startBuffer(t, c)
	eventually(t, 60*time.Second, "the group's 4 admissions refunded by the new buffer", func() bool { return m.refunded(t) == 4 })
	eventually(t, 10*time.Second, "4 missing counted by the new buffer", func() bool { return r2.b.Stats().Missing == 4 })
}

// A malformed marker is dead-lettered with its reason, and counted.
func TestMalformedMarkerIsDeadLettered(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	bad := start("", 8) // no group id
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStart, "bad-1", mustMarshal(t, bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.PublishOnce(testCtx(t), m.js, proto.SubjectGroupStart, "bad-2", []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "2 dead-lettered", func() bool { return r.b.Stats().DeadLettered == 2 })
	eventually(t, 10*time.Second, "2 in the dead-letter stream", func() bool { return m.msgs(t, proto.StreamDeadLetter) == 2 })
	if n := m.markersPending(t); n != 0 {
		t.Fatalf("%d markers pending, want 0", n)
	}
}

// A marker read after all its group's members (the two consumers are read independently) joins the ready
// group and is acked with it; it does not open a second group that would time out and be refunded.
func TestMarkerAfterItsCompleteGroupJoinsIt(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 4, Eta: 1, GroupTimeout: time.Second})
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the group's members held", func() bool { return r.b.Stats().Received == 2 })
	m.announce(t, start("g1", 2))
	time.Sleep(2500 * time.Millisecond) // past the group timeout: a second group of that id would be refunded
	if got := m.refunded(t); got != 0 {
		t.Fatalf("refunded %d for a complete group waiting for its batch, want 0", got)
	}
	m.publish(t, ep("g2", 0, 2, 0), "")
	m.publish(t, ep("g2", 1, 2, 0), "")
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	eventually(t, 10*time.Second, "episodes and the marker acked", func() bool { return m.pending(t) == 0 && m.markersPending(t) == 0 })
	if got := m.refunded(t); got != 0 {
		t.Fatalf("refunded %d, want 0", got)
	}
	if s := r.b.Stats(); s.Batched != 4 || s.GroupStarts != 1 || s.PendingGroups != 0 {
		t.Fatalf("stats = %+v, want 4 batched, 1 group start", s)
	}
}
