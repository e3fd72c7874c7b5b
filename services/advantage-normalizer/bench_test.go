package normalizer_test

import (
	"fmt"
	"testing"

	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
)

// benchBatch is a default-sized batch: 8 groups of 8 episodes of 10 turns, over two tasks.
func benchBatch() *proto.Batch {
	b := &proto.Batch{Schema: proto.SchemaVersion, ID: "b-bench"}
	for g := 0; g < 8; g++ {
		task := []string{"alfworld", "webshop"}[g%2]
		for k := 0; k < 8; k++ {
			ep := proto.Episode{Schema: proto.SchemaVersion, ID: fmt.Sprintf("g%d-%d", g, k), GroupID: fmt.Sprintf("g%d", g), GroupSize: 8,
				Task: task, Reward: float64((g+k)%3) / 2, Status: proto.StatusCompleted}
			if k == 7 {
				ep.Status, ep.Reward = proto.StatusTurnLimit, 0
			}
			for t := 0; t < 10; t++ {
				ep.Turns = append(ep.Turns, proto.Turn{Observation: "o", Candidates: []string{"a", "b"}, LogProb: -0.7})
			}
			b.Episodes = append(b.Episodes, ep)
		}
	}
	return b
}

// BenchmarkAdvantages is the normalizer's work on one batch: GRPO group advantages, broadcast to every turn,
// then task normalization.
func BenchmarkAdvantages(b *testing.B) {
	batch := benchBatch()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := normalizer.Advantages(batch, normalizer.Options{AbnormalReward: -0.2, TaskNorm: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTaskNormalize is task normalization alone over 640 action-level advantages of two tasks.
func BenchmarkTaskNormalize(b *testing.B) {
	tasks := make([]string, 64)
	adv := make([][]float64, 64)
	for i := range adv {
		tasks[i] = []string{"alfworld", "webshop"}[i%2]
		adv[i] = make([]float64, 10)
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range adv {
			for t := range adv[i] {
				adv[i][t] = float64(i%8) - 3.5
			}
		}
		if _, err := normalizer.TaskNormalize(tasks, adv); err != nil {
			b.Fatal(err)
		}
	}
}
