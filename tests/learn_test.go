package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/envclient"
)

// TestMeshLearns runs the five services on an embedded server from a fixed seed and checks that held-out
// success of the built-in family rises by at least 30 points, evaluated on the same held-out instances.
func TestMeshLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for minutes")
	}
	const task, evalN, rise = "alfworld", 200, 0.30
	url := embedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	tcfg := trainer.DefaultConfig()
	tcfg.Model.Seed = 7
	m, err := mesh.Start(ctx, mesh.Config{NATSURL: url, Tasks: []string{task}, Seed: 7, GroupSize: 8, BatchSize: 64, Eta: 2,
		Trainer: tcfg, Normalizer: normalizer.DefaultConfig(), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if err := m.WaitVersion(ctx, 0); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, url)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	env := envclient.New(nc, envclient.Config{})
	evalCfg := rollout.EvalConfig{Tasks: []string{task}, Episodes: evalN, Seed: 99}
	before, _, err := mesh.EvaluateCurrent(ctx, js, env, evalCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out success before training: %.1f%% (%d episodes)", 100*before[task].Success, before[task].Episodes)
	if err := m.StartRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var after map[string]rollout.EvalResult
	for time.Since(start) < 5*time.Minute {
		time.Sleep(20 * time.Second)
		after, _, err = mesh.EvaluateCurrent(ctx, js, env, evalCfg)
		if err != nil {
			t.Fatal(err)
		}
		st := m.Trainer.Stats()
		t.Logf("%5.0fs: version %d, %d episodes trained, held-out success %.1f%%", time.Since(start).Seconds(), st.Version, st.EpisodesTrained, 100*after[task].Success)
		if after[task].Success-before[task].Success >= rise+0.05 {
			break
		}
	}
	m.StopRollouts()
	if err := m.Err(); err != nil {
		t.Fatalf("a service failed: %v", err)
	}
	if got := after[task].Success - before[task].Success; got < rise {
		t.Fatalf("held-out success rose %.1f points (%.1f%% → %.1f%%), want at least %.0f", 100*got, 100*before[task].Success, 100*after[task].Success, 100*rise)
	}
	if st := m.Trainer.Stats(); st.MaxStaleness > 2 {
		t.Fatalf("trained an episode %d versions stale, bound is 2", st.MaxStaleness)
	}
}
