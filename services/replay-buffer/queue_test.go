package replaybuffer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/shared/bus"
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

// With MaxQueued 2, a third batch waits in the buffer until the trainer takes one of the two queued.
func TestReleaseWaitsWhileTheTrainerHasEnoughQueued(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	norm, err := m.js.CreateOrUpdateConsumer(ctx, proto.StreamBatches, bus.ConsumerConfig(proto.ConsumerNormalizer, proto.SubjectBatches, 64, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.js.CreateOrUpdateConsumer(ctx, proto.StreamTrain, bus.ConsumerConfig(proto.ConsumerTrainer, proto.SubjectTrain, 64, time.Minute)); err != nil {
		t.Fatal(err)
	}
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
