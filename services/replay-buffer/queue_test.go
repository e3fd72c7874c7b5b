package replaybuffer_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
)

// Groups are batched oldest admission first, whatever order they completed in: the oldest are the
// nearest to the staleness bound.
func TestOldestAdmissionsAreBatchedFirst(t *testing.T) {
	m := newMesh(t)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 2, GroupTimeout: time.Minute})
	// No version yet: nothing is released while the groups complete, newest admission first.
	for _, g := range []struct {
		id string
		v  int64
	}{{"g-v1", 1}, {"g-v0", 0}, {"g-v2", 2}} {
		m.publish(t, ep(g.id, 0, 2, g.v), "")
		m.publish(t, ep(g.id, 1, 2, g.v), "")
	}
	eventually(t, 10*time.Second, "6 episodes received", func() bool { return r.b.Stats().Received == 6 })
	m.setVersion(t, 2)
	eventually(t, 10*time.Second, "3 batches", func() bool { return m.msgs(t, proto.StreamBatches) == 3 })
	var order []string
	for seq := uint64(1); seq <= 3; seq++ {
		order = append(order, m.batch(t, seq).Episodes[0].GroupID)
	}
	if want := []string{"g-v0", "g-v1", "g-v2"}; !slices.Equal(order, want) {
		t.Fatalf("batches in group order %v, want %v", order, want)
	}
}

// Groups of one admission version are batched in the order of their instances (seed, then task), not in
// the order they completed: a batch's groups come in one order whenever they are played.
func TestGroupsOfOneVersionAreBatchedByInstance(t *testing.T) {
	m := newMesh(t)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 8, MaxBatchSize: 8, Eta: 2, GroupTimeout: time.Minute})
	// Completed (both members in) in an order that is neither the seeds' nor the ids'.
	groups := []struct {
		id, task string
		seed     uint64
	}{{"g-a", "alfworld", 30}, {"g-b", "alfworld", 10}, {"g-c", "webshop", 20}, {"g-d", "alfworld", 20}}
	for _, g := range groups {
		for k := range 2 {
			e := ep(g.id, k, 2, 0)
			e.Task, e.Seed = g.task, g.seed
			m.publish(t, e, "")
		}
	}
	eventually(t, 10*time.Second, "8 episodes received", func() bool { return r.b.Stats().Received == 8 })
	m.setVersion(t, 0)
	eventually(t, 10*time.Second, "a batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	var order []string
	for _, e := range m.batch(t, 1).Episodes {
		if len(order) == 0 || order[len(order)-1] != e.GroupID {
			order = append(order, e.GroupID)
		}
	}
	if want := []string{"g-b", "g-d", "g-c", "g-a"}; !slices.Equal(order, want) {
		t.Fatalf("groups in the batch %v, want by seed then task %v", order, want)
	}
}

// With MaxQueued 2, a third batch waits in the buffer until the trainer takes one of the two queued.
func TestReleaseWaitsWhileTheTrainerHasEnoughQueued(t *testing.T) {
	m := newMesh(t)
	norm := queueConsumers(t, m)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 2, GroupTimeout: time.Minute, MaxQueued: 2})
	for _, g := range []string{"g1", "g2", "g3"} {
		m.publish(t, ep(g, 0, 2, 0), "")
		m.publish(t, ep(g, 1, 2, 0), "")
	}
	eventually(t, 10*time.Second, "2 batches", func() bool { return m.msgs(t, proto.StreamBatches) == 2 })
	eventually(t, 10*time.Second, "6 episodes received", func() bool { return r.b.Stats().Received == 6 })
	time.Sleep(300 * time.Millisecond)
	if n := m.msgs(t, proto.StreamBatches); n != 2 {
		t.Fatalf("%d batches released with 2 queued and MaxQueued 2, want 2", n)
	}
	// The normalizer takes one batch (acks it) and nothing reached the trainer: one queued, room for one.
	msgs, err := norm.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range msgs.Messages() {
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the third batch", func() bool { return m.msgs(t, proto.StreamBatches) == 3 })
}

// Once a version has named one of its batches, the buffer knows every batch the trainer has not applied;
// when the consumers' depth cannot be read it counts those instead of releasing unchecked.
func TestUnreadableQueueCountsTheBatchesNotApplied(t *testing.T) {
	m := newMesh(t)
	queueConsumers(t, m)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 20, GroupTimeout: time.Minute, MaxQueued: 1})
	for _, g := range []string{"g1", "g2"} {
		m.publish(t, ep(g, 0, 2, 0), "")
		m.publish(t, ep(g, 1, 2, 0), "")
	}
	eventually(t, 10*time.Second, "the first batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	m.applied(t, 1, m.batch(t, 1).ID)
	eventually(t, 10*time.Second, "the second batch", func() bool { return m.msgs(t, proto.StreamBatches) == 2 })
	if err := m.js.DeleteConsumer(testCtx(t), proto.StreamBatches, proto.ConsumerNormalizer); err != nil {
		t.Fatal(err)
	}
	m.publish(t, ep("g3", 0, 2, 0), "")
	m.publish(t, ep("g3", 1, 2, 0), "")
	eventually(t, 10*time.Second, "6 episodes received", func() bool { return r.b.Stats().Received == 6 })
	time.Sleep(time.Second)
	if n := m.msgs(t, proto.StreamBatches); n != 2 {
		t.Fatalf("%d batches released with the second not applied, MaxQueued 1 and the queue unreadable, want 2", n)
	}
	m.applied(t, 2, m.batch(t, 2).ID)
	eventually(t, 10*time.Second, "the third batch once the second is applied", func() bool { return m.msgs(t, proto.StreamBatches) == 3 })
}

// queueConsumers creates the advantage-normalizer's and the trainer's consumers, whose backlog is the queue
// MaxQueued bounds, and returns the normalizer's.
func queueConsumers(t *testing.T, m *mesh) jetstream.Consumer {
	t.Helper()
	ctx := testCtx(t)
	norm, err := m.js.CreateOrUpdateConsumer(ctx, proto.StreamBatches, bus.ConsumerConfig(proto.ConsumerNormalizer, proto.SubjectBatches, 64, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.js.CreateOrUpdateConsumer(ctx, proto.StreamTrain, bus.ConsumerConfig(proto.ConsumerTrainer, proto.SubjectTrain, 64, time.Minute)); err != nil {
		t.Fatal(err)
	}
	return norm
}

// A batch composed while another is queued trains after it, one version later: its staleness is counted at
// that version, so a group that would be stale by then is dropped at the buffer and a fresher one takes
// its place, instead of the trainer dropping it from a batch that then trains short.
func TestBatchBehindAQueuedOneIsComposedForTheVersionAfter(t *testing.T) {
	m := newMesh(t)
	queueConsumers(t, m)
	m.setVersion(t, 0)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 1, GroupTimeout: time.Minute, MaxQueued: 2})
	m.publish(t, ep("g-first", 0, 2, 0), "")
	m.publish(t, ep("g-first", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the first batch", func() bool { return m.msgs(t, proto.StreamBatches) == 1 })
	// Start version -1 is within eta 1 of version 0, not of version 1, which the next batch trains at.
	m.publish(t, ep("g-old", 0, 2, -1), "")
	m.publish(t, ep("g-old", 1, 2, -1), "")
	m.publish(t, ep("g-new", 0, 2, 0), "")
	m.publish(t, ep("g-new", 1, 2, 0), "")
	eventually(t, 10*time.Second, "the second batch", func() bool { return m.msgs(t, proto.StreamBatches) == 2 })
	b := m.batch(t, 2)
	if b.TrainerVersion != 1 || len(b.Episodes) != 2 || b.Episodes[0].GroupID != "g-new" {
		t.Fatalf("second batch composed for version %d with %v, want version 1 with g-new", b.TrainerVersion, ids(b))
	}
	eventually(t, 10*time.Second, "g-old dropped as stale", func() bool { return r.b.Stats().DroppedStale == 2 })
	if got := m.batch(t, 1).TrainerVersion; got != 0 {
		t.Fatalf("first batch composed for version %d, want 0 (nothing queued ahead of it)", got)
	}
}

// A batch a previous buffer released and the trainer has not applied yet counts as queued: this buffer's
// first batch is composed for the version after it, although this buffer has released nothing.
func TestBatchQueuedByAPreviousBufferCounts(t *testing.T) {
	m := newMesh(t)
	queueConsumers(t, m)
	m.setVersion(t, 0)
	prev, err := codec.Marshal(proto.Batch{Schema: proto.SchemaVersion, ID: "previous-buffer-batch", Episodes: []proto.Episode{ep("g-prev", 0, 2, 0), ep("g-prev", 1, 2, 0)}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.js.Publish(testCtx(t), proto.SubjectBatches, prev); err != nil {
		t.Fatal(err)
	}
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 1, GroupTimeout: time.Minute, MaxQueued: 2})
	// Start version -1 is within eta 1 of version 0, not of version 1, which the next batch trains at.
	m.publish(t, ep("g-old", 0, 2, -1), "")
	m.publish(t, ep("g-old", 1, 2, -1), "")
	m.publish(t, ep("g-new", 0, 2, 0), "")
	m.publish(t, ep("g-new", 1, 2, 0), "")
	eventually(t, 10*time.Second, "4 episodes batched or dropped", func() bool { st := r.b.Stats(); return st.Batched+st.DroppedStale == 4 })
	if n := m.msgs(t, proto.StreamBatches); n != 2 {
		t.Fatalf("%d batches in the stream, want the previous buffer's and one of this buffer's", n)
	}
	b := m.batch(t, 2)
	if b.TrainerVersion != 1 || len(b.Episodes) != 2 || b.Episodes[0].GroupID != "g-new" {
		t.Fatalf("first batch composed for version %d with %v, want version 1 with g-new", b.TrainerVersion, ids(b))
	}
	if st := r.b.Stats(); st.DroppedStale != 2 {
		t.Fatalf("%d episodes dropped as stale, want g-old's 2", st.DroppedStale)
	}
}

// With Lead, the next batch is released shortly before the trainer's step is expected to end, although
// the one it trains fills MaxQueued 1: a version then finds its next batch already queued. Without Lead
// the next batch waits for the version.
func TestLeadComposesBeforeTheStepEnds(t *testing.T) {
	for _, lead := range []time.Duration{0, 500 * time.Millisecond} {
		t.Run(fmt.Sprintf("lead %v", lead), func(t *testing.T) {
			m := newMesh(t)
			norm := queueConsumers(t, m)
			m.setVersion(t, 0)
			m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 2, Eta: 20, GroupTimeout: time.Minute, MaxQueued: 1, Lead: lead})
			const steps = 8
			step := 600 * time.Millisecond
			if lead > 0 {
				step = time.Second // long beside the lead, so a busy machine's late composition still lands inside the step
			}
			for g := range steps + 1 {
				m.publish(t, ep(fmt.Sprintf("g%d", g), 0, 2, 0), "")
				m.publish(t, ep(fmt.Sprintf("g%d", g), 1, 2, 0), "")
			}
			// A trainer that takes each batch, works for step, and publishes the version that applied it
			// before acking it, as the trainer does; it counts the versions whose next batch was out already.
			ready := 0
			for v := int64(1); v <= steps; v++ {
				msgs, err := norm.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var got jetstream.Msg
				for msg := range msgs.Messages() {
					got = msg
				}
				if got == nil {
					t.Fatalf("no batch for version %d", v)
				}
				time.Sleep(step)
				var b proto.Batch
				if err := codec.Unmarshal(got.Data(), &b); err != nil {
					t.Fatal(err)
				}
				if m.msgs(t, proto.StreamBatches) > uint64(v) {
					ready++
				}
				m.applied(t, v, b.ID)
				if err := got.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			// The step durations are learned from the first versions; from then on each step's next batch is out
			// Lead before its end.
			if lead == 0 && ready != 0 {
				t.Fatalf("without lead, %d of %d versions found their next batch released before them", ready, steps)
			}
			if lead > 0 && ready < steps-paceWarmup {
				t.Fatalf("with lead %v, %d of %d versions found their next batch released before them, want at least %d", lead, ready, steps, steps-paceWarmup)
			}
		})
	}
}

// paceWarmup bounds the steps before the buffer has seen enough of them to expect their end.
const paceWarmup = 4
