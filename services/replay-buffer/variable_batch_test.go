package replaybuffer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
)

// When more complete groups are ready than B needs, a batch takes every ready group up to MaxBatchSize
// (AgentRL's variable batch); the rest makes the next batch.
func TestVariableBatchTakesReadyGroupsUpToMax(t *testing.T) {
	m := newMesh(t)
	r := m.startBuffer(t, replaybuffer.Config{BatchSize: 2, MaxBatchSize: 4, Eta: 1, GroupTimeout: time.Minute})
	// No version yet: three complete groups pile up.
	for _, g := range []string{"g1", "g2", "g3"} {
		m.publish(t, ep(g, 0, 2, 0), "")
		m.publish(t, ep(g, 1, 2, 0), "")
	}
	eventually(t, 10*time.Second, "6 episodes received", func() bool { return r.b.Stats().Received == 6 })
	m.setVersion(t, 0)
	eventually(t, 10*time.Second, "two batches", func() bool { return m.msgs(t, proto.StreamBatches) == 2 })
	if got, want := ids(m.batch(t, 1)), []string{"g1-0", "g1-1", "g2-0", "g2-1"}; !slices.Equal(got, want) {
		t.Fatalf("first batch holds %v, want %v (every ready group up to 4 episodes)", got, want)
	}
	if got, want := ids(m.batch(t, 2)), []string{"g3-0", "g3-1"}; !slices.Equal(got, want) {
		t.Fatalf("second batch holds %v, want %v", got, want)
	}
}

func TestMaxBatchSizeValidated(t *testing.T) {
	cfg := replaybuffer.Config{BatchSize: 8, MaxBatchSize: 4}
	cfg.SetDefaults()
	if err := cfg.Validate(); err == nil {
		t.Fatal("a max batch size below the batch size was accepted")
	}
	cfg = replaybuffer.Config{BatchSize: 8}
	cfg.SetDefaults()
	if cfg.MaxBatchSize != 16 {
		t.Fatalf("default max batch size %d, want 2B = 16", cfg.MaxBatchSize)
	}
}
