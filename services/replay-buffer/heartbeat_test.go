package replaybuffer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
)

// beater publishes a rollout replica's heartbeats, as rollout does, listing the groups set last.
type beater struct {
	mu     sync.Mutex
	groups []string
	stop   func()
}

func (m *mesh) beat(t *testing.T, rollout string, groups ...string) *beater {
	t.Helper()
	return m.beatAs(t, rollout, "", groups...)
}

// beatAs is beat with the heartbeats naming the replica's run (RolloutHeartbeat.Instance).
func (m *mesh) beatAs(t *testing.T, rollout, instance string, groups ...string) *beater {
	t.Helper()
	nc := m.conn(t)
	b := &beater{groups: groups}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			b.mu.Lock()
			hb := proto.RolloutHeartbeat{Schema: proto.SchemaVersion, RolloutID: rollout, Groups: b.groups, SentAt: time.Now().UnixNano(), Instance: instance}
			b.mu.Unlock()
			if err := nc.Publish(proto.SubjectRolloutHeartbeat, mustMarshal(t, hb)); err != nil {
				t.Errorf("heartbeat: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	b.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(b.stop)
	return b
}

func (b *beater) list(groups ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.groups = groups
}

// A replica that beats but no longer lists one of its groups (it restarted and lost it) gets that group
// released after the replica timeout instead of the group timeout. A group its replica still lists stays
// open meanwhile; when the replica stops beating (dead, or cut off), its other groups wait for the group
// timeout, since silence does not say that their members will not come.
func TestGroupsOfAGoneReplicaAreReleasedAfterTheReplicaTimeout(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: 15 * time.Second, ReplicaTimeout: time.Second})
	hb := m.beat(t, "r1", "lost", "kept")
	// The members do not name their replica (as ep builds them): the markers do, read after the member
	// for kept and before them for lost.
	m.publish(t, ep("kept", 0, 4, 0), "")
	keptSeen := time.Now()
	eventually(t, 10*time.Second, "kept's member held", func() bool { return r.b.Stats().Received == 1 })
	m.announce(t, start("lost", 4))
	m.announce(t, start("kept", 4))
	eventually(t, 10*time.Second, "the markers read", func() bool { return r.b.Stats().GroupStarts == 2 })
	m.publish(t, ep("lost", 0, 4, 0), "")
	m.publish(t, ep("lost", 1, 4, 0), "")
	eventually(t, 10*time.Second, "markers and members held", func() bool { s := r.b.Stats(); return s.GroupStarts == 2 && s.Received == 3 })
	time.Sleep(2500 * time.Millisecond) // past the replica timeout: both groups are listed, so both stay open
	if s := r.b.Stats(); s.Orphaned != 0 || m.refunded(t) != 0 || m.msgs(t, proto.StreamBatches) != 0 {
		t.Fatalf("stats %+v, refunded %d: a group its replica lists was released", s, m.refunded(t))
	}

	began := time.Now()
	hb.list("kept")
	eventually(t, 10*time.Second, "the lost group's 2 members batched", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if waited := time.Since(began); waited < time.Second {
		t.Fatalf("released after %v, before the 1s replica timeout", waited)
	}
	if got := ids(m.batch(t, 1)); len(got) != 2 || got[0] != "lost-0" || got[1] != "lost-1" {
		t.Fatalf("batch %v, want lost-0 and lost-1", got)
	}
	eventually(t, 10*time.Second, "the lost group's 2 missing admissions refunded", func() bool { return m.refunded(t) == 2 })
	// The buffer counts a settled group's losses just after refunding them.
	eventually(t, 10*time.Second, "1 orphaned group, 2 missing", func() bool { s := r.b.Stats(); return s.Orphaned == 1 && s.Missing == 2 })

	hb.stop()                   // the replica dies, or is cut off from NATS
	time.Sleep(3 * time.Second) // several replica timeouts of silence
	if s := r.b.Stats(); s.Orphaned != 1 || m.refunded(t) != 2 || s.Silences < 1 {
		t.Fatalf("stats %+v, refunded %d: want the replica counted silent and its kept group open until its group timeout", s, m.refunded(t))
	}
	eventually(t, 30*time.Second, "the kept group refunded whole (1 member is too few to train)", func() bool { return m.refunded(t) == 6 })
	if waited := time.Since(keptSeen); waited < 15*time.Second {
		t.Fatalf("kept group released %v after it was first seen, before the 15s group timeout", waited)
	}
	eventually(t, 10*time.Second, "1 orphaned group, 5 missing, 1 dropped in a small group", func() bool {
		s := r.b.Stats()
		return s.Orphaned == 1 && s.Missing == 5 && s.DroppedGroup == 1
	})
	if got := m.refunded(t); got != 6 {
		t.Fatalf("refunded %d in the end, want 6", got)
	}
	eventually(t, 10*time.Second, "members and markers acked", func() bool { return m.pending(t) == 0 && m.markersPending(t) == 0 })
}

// A replica cut off from NATS for several replica timeouts, with members still to publish, keeps its
// group: when it is back, beating and publishing, the group trains whole and nothing is late.
func TestGroupOfAReplicaCutOffWaitsForItsMembers(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 4, Eta: 1, GroupTimeout: time.Minute, ReplicaTimeout: time.Second})
	hb := m.beat(t, "r1", "g")
	m.announce(t, start("g", 4))
	m.publish(t, ep("g", 0, 4, 0), "")
	m.publish(t, ep("g", 1, 4, 0), "")
	// Another replica goes on publishing, so the buffer has read the stream's end all along.
	other := m.beat(t, "r2", "h")
	m.publish(t, ep("h", 0, 2, 0), "")
	eventually(t, 10*time.Second, "marker and 3 members held", func() bool { s := r.b.Stats(); return s.GroupStarts == 1 && s.Received == 3 })
	hb.stop() // r1 cut off
	time.Sleep(3500 * time.Millisecond)
	if s := r.b.Stats(); s.Orphaned != 0 || m.refunded(t) != 0 || m.msgs(t, proto.StreamBatches) != 0 || s.Silences < 1 {
		t.Fatalf("stats %+v, refunded %d: want the replica counted silent and its group open", s, m.refunded(t))
	}
	m.beat(t, "r1", "g") // back: its buffered heartbeats and the members it kept publishing go out
	m.publish(t, ep("g", 2, 4, 0), "")
	m.publish(t, ep("g", 3, 4, 0), "")
	eventually(t, 10*time.Second, "the whole group batched", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	if got := ids(m.batch(t, 1)); len(got) != 4 {
		t.Fatalf("batch %v, want g-0 to g-3", got)
	}
	other.stop()
	if s := r.b.Stats(); s.Late != 0 || s.Orphaned != 0 || s.Missing != 0 || s.Silences < 1 {
		t.Fatalf("stats %+v: want no late, orphaned or missing member, and its silence counted", s)
	}
}

// A replica never heard from (one that does not beat) is left to the group timeout, even while another
// replica beats.
func TestGroupOfASilentReplicaWaitsForTheGroupTimeout(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, Eta: 1, GroupTimeout: 4 * time.Second, ReplicaTimeout: time.Second})
	m.beat(t, "r2", "other")
	began := time.Now()
	m.announce(t, start("quiet", 8)) // rollout r1, which never beats
	eventually(t, 20*time.Second, "the group's 8 admissions refunded", func() bool { return m.refunded(t) == 8 })
	if waited := time.Since(began); waited < 4*time.Second {
		t.Fatalf("refunded after %v, before the 4s group timeout", waited)
	}
	eventually(t, 10*time.Second, "8 missing", func() bool { return r.b.Stats().Missing == 8 })
	if s := r.b.Stats(); s.Orphaned != 0 {
		t.Fatalf("stats %+v: want no orphaned group", s)
	}
}

// A heartbeat that cannot be decoded or validated is counted and ignored; the buffer goes on.
func TestMalformedHeartbeatIsCounted(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	r := m.startBuffer(t, cfg(2))
	nc := m.conn(t)
	for _, data := range [][]byte{{0xc1}, mustMarshal(t, proto.RolloutHeartbeat{Schema: proto.SchemaVersion, Groups: []string{"g1"}})} {
		if err := nc.Publish(proto.SubjectRolloutHeartbeat, data); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "2 malformed heartbeats counted", func() bool { return r.b.Stats().BadHeartbeats == 2 })
	m.publish(t, ep("g1", 0, 2, 0), "")
	m.publish(t, ep("g1", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
}
