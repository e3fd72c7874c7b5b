package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// dataBenchJSON runs a data-plane benchmark's result through JSON, as --json prints it.
func dataBenchJSON(t *testing.T, v any) map[string]any {
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

func dataBenchPositive(t *testing.T, obj map[string]any, key string) {
	t.Helper()
	if v, ok := obj[key].(float64); !ok || !(v > 0) {
		t.Errorf("%s = %v, want a positive number", key, obj[key])
	}
}

// A tiny bench mesh, its clients in-process and over loopback TCP: the five services move zero-latency
// episodes, the raw publish-and-consume moves the same bytes, and the JSON has the documented keys with
// positive rates. No timing is asserted.
func TestBenchMeshSmoke(t *testing.T) {
	for _, loopback := range []bool{false, true} {
		want := map[bool]string{false: "in-process", true: "loopback tcp"}[loopback]
		t.Run(want, func(t *testing.T) { benchMeshSmoke(t, loopback, want) })
	}
}

func benchMeshSmoke(t *testing.T, loopback bool, connection string) {
	c := &benchMeshCmd{Seconds: 1.5, Warmup: 0.5, Turns: 2, GroupSize: 4, BatchSize: 16, Eta: 2, Concurrency: 16, Bits: 10,
		RawMin: 200, RawWindow: 64, RawRounds: 2, Loopback: loopback, JSON: true, LogLevel: "error"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// No deadline, as the command line's context has none (a flush that needs one would fail here too);
	// go test's timeout bounds it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := dataBenchJSON(t, res)
	for _, k := range []string{"mesh_episodes_per_s", "mesh_env_steps_per_s", "raw_episodes_per_s", "ratio", "episode_bytes", "policy_versions",
		"raw_env_episodes_per_s", "raw_both_episodes_per_s", "ratio_to_raw_both", "env_calls_per_batch",
		"mesh_msgs_per_episode", "raw_msgs_per_episode", "mesh_cpu_us_per_msg", "raw_cpu_us_per_msg",
		"mesh_bytes_in_per_episode", "checkpoint_bytes", "checkpoint_bytes_per_episode"} {
		dataBenchPositive(t, out, k)
	}
	// A raw episode is four messages at least (publish, its ack, the delivery, the consumer's ack); a mesh
	// episode is those and its env calls besides.
	t.Logf("%s: messages per episode: raw %.3f, mesh %.3f", connection, res.RawMsgsPerEpisode, res.MeshMsgsPerEpisode)
	if res.RawMsgsPerEpisode < 4 || res.MeshMsgsPerEpisode <= res.RawMsgsPerEpisode {
		t.Errorf("messages per episode: raw %.2f, mesh %.2f; want raw at least 4 and the mesh more", res.RawMsgsPerEpisode, res.MeshMsgsPerEpisode)
	}
	// The services send every episode to be stored, and the checkpoint is part of what they send.
	if res.MeshBytesInPerEpisode < float64(res.EpisodeBytes) || res.CheckpointBytesPerEpisode >= res.MeshBytesInPerEpisode {
		t.Errorf("bytes in per episode %.0f, checkpoint's %.0f, episode %d B: want at least an episode's bytes, more than the checkpoint's",
			res.MeshBytesInPerEpisode, res.CheckpointBytesPerEpisode, res.EpisodeBytes)
	}
	if res.Connection != connection {
		t.Errorf("connection %q, want %q", res.Connection, connection)
	}
	if res.TurnsPerEpisode != float64(c.Turns) {
		t.Errorf("turns per episode %v, want the zero family's %d", res.TurnsPerEpisode, c.Turns)
	}
	if res.RawEpisodes < c.RawMin || int64(res.RawEpisodes) < res.MeshEpisodes {
		t.Errorf("raw moved %d episodes, want at least %d and at least the mesh's %d", res.RawEpisodes, c.RawMin, res.MeshEpisodes)
	}
}

// A tiny bench weights: versions of a 1 MB policy reach two rollout pools, next to a raw put and get; the
// JSON is keyed by size in MB with positive times. No timing is asserted.
func TestBenchWeightsSmoke(t *testing.T) {
	c := &benchWeightsCmd{Sizes: []int{1, 2}, Rollouts: 2, Iterations: 2, JSON: true, LogLevel: "error"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := dataBenchJSON(t, res)
	if len(out) != 2 {
		t.Errorf("JSON keys %v, want one per size", out)
	}
	for _, size := range []string{"1", "2"} {
		r, ok := out[size].(map[string]any)
		if !ok {
			t.Fatalf("JSON has no size %q: %v", size, out)
		}
		for _, k := range []string{"p50_ms", "p99_ms", "raw_ms", "ratio", "bytes"} {
			dataBenchPositive(t, r, k)
		}
		if r["p99_ms"].(float64) < r["p50_ms"].(float64) {
			t.Errorf("size %s: p99 %v below p50 %v", size, r["p99_ms"], r["p50_ms"])
		}
	}
}

func TestBenchDataFlagsValidate(t *testing.T) {
	bad := []interface{ Validate() error }{
		&benchMeshCmd{Seconds: 0, Turns: 4, RawMin: 1, RawWindow: 1, RawRounds: 1},
		&benchMeshCmd{Seconds: 1, Turns: 0, RawMin: 1, RawWindow: 1, RawRounds: 1},
		&benchMeshCmd{Seconds: 1, Turns: 4, RawMin: 1, RawWindow: 1, RawRounds: 0},
		&benchWeightsCmd{Sizes: []int{3}, Rollouts: 1, Iterations: 1},
		&benchWeightsCmd{Sizes: []int{512}, Rollouts: 1, Iterations: 1},
		&benchWeightsCmd{Sizes: []int{1}, Rollouts: 0, Iterations: 1},
		&benchWeightsCmd{Rollouts: 1, Iterations: 1},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("case %d (%+v): no error", i, c)
		}
	}
	for mb, want := range map[int]int{1: 18, 16: 22, 64: 24, 256: 26} {
		if got, err := weightsBits(mb); err != nil || got != want {
			t.Errorf("weightsBits(%d) = %d, %v; want %d", mb, got, err, want)
		}
	}
}
