package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// benchJSON runs a benchmark's result through JSON, as --json prints it.
func benchJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func benchWantPositive(t *testing.T, obj map[string]any, key string) float64 {
	t.Helper()
	v, ok := obj[key].(float64)
	if !ok || !(v > 0) {
		t.Errorf("%s = %v, want a positive number", key, obj[key])
	}
	return v
}

// A tiny async-vs-sync run: both modes train, the JSON has the keys the README documents, rates are
// positive and nothing trained beyond the staleness bound. No timing is asserted.
func TestBenchAsyncVsSyncSmoke(t *testing.T) {
	c := &benchAsyncCmd{
		Tasks: []string{"db"}, Episodes: 16, Warmup: 1, GroupSize: 4, BatchSize: 8, Concurrency: 16, Eta: 2, Epochs: 1,
		LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, EnvHosts: 1, EvalEpisodes: 4, Seed: 1,
		Timeout: 2 * time.Minute, JSON: true, LogLevel: "error", policyBits: 12,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := benchJSON(t, res)
	benchWantPositive(t, out, "sync_episodes_per_s")
	benchWantPositive(t, out, "async_episodes_per_s")
	benchWantPositive(t, out, "speedup")
	benchWantPositive(t, out, "trainer_busy_async")
	benchWantPositive(t, out, "trainer_busy_sync")
	for _, k := range []string{"max_staleness", "staleness_histogram", "heldout_success_sync", "heldout_success_async", "sync", "async", "workload"} {
		if _, ok := out[k]; !ok {
			t.Errorf("JSON has no %q", k)
		}
	}
	if ms, ok := out["max_staleness"].(float64); !ok || ms < 0 || ms > float64(c.Eta) {
		t.Errorf("max_staleness %v, want within [0, eta=%d]", out["max_staleness"], c.Eta)
	}
	if res.Sync.MaxStaleness != 0 || len(res.Sync.Staleness) != 1 {
		t.Errorf("synchronous mode trained stale data: histogram %v", res.Sync.Staleness)
	}
	if len(res.Async.Staleness) > c.Eta+1 {
		t.Errorf("asynchronous staleness histogram %v goes past eta %d", res.Async.Staleness, c.Eta)
	}
	for _, r := range []*trialResult{res.Sync, res.Async} {
		if r.Episodes < c.Episodes || r.EpisodesTrained < c.Episodes+c.Warmup*int64(c.BatchSize) || len(r.HeldOut) != 1 {
			t.Errorf("trial %+v: want at least %d episodes measured and a held-out score for db", r, c.Episodes)
		}
	}
}

// A tiny scale run over 1 and 2 replicas: episodes_per_s is keyed by replica count, rates are positive.
func TestBenchScaleSmoke(t *testing.T) {
	c := &benchScaleCmd{
		Replicas: []int{1, 2}, Concurrency: 4, Tasks: []string{"db"}, Episodes: 16, Warmup: 1, GroupSize: 4, BatchSize: 8,
		Eta: 2, Epochs: 1, LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, EnvHosts: 2, Seed: 1,
		Timeout: 2 * time.Minute, JSON: true, LogLevel: "error", policyBits: 12,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := benchJSON(t, res)
	for _, k := range []string{"episodes_per_s", "env_steps_per_s", "speedup", "trainer_busy"} {
		m, ok := out[k].(map[string]any)
		if !ok {
			t.Fatalf("%s = %v, want an object keyed by replica count", k, out[k])
		}
		for _, n := range []string{"1", "2"} {
			benchWantPositive(t, m, n)
		}
	}
	if ms, ok := out["max_staleness"].(float64); !ok || ms < 0 || ms > float64(c.Eta) {
		t.Errorf("max_staleness %v, want within [0, eta=%d]", out["max_staleness"], c.Eta)
	}
}

func TestBenchFlagsValidate(t *testing.T) {
	bad := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 0, GroupSize: 8, BatchSize: 12, Concurrency: 4, Eta: 0, Epochs: 1, EnvHosts: 1,
		LatencyMedian: 20 * time.Millisecond, LatencyP99: time.Millisecond}
	if err := bad.Validate(); err == nil {
		t.Fatal("bad async-vs-sync flags accepted")
	}
	badScale := &benchScaleCmd{Replicas: []int{0}, Tasks: []string{"db"}, Episodes: 1, GroupSize: 8, BatchSize: 64, Concurrency: 8, Epochs: 1, EnvHosts: 1}
	if err := badScale.Validate(); err == nil {
		t.Fatal("bad scale flags accepted")
	}
}
