package config

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// testCLI has a flag of every kind the services have.
type testCLI struct {
	Common
	ID           string             `name:"id" env:"JETRL_TEST_ID" help:"Replica id."`
	BatchSize    int                `name:"batch-size" env:"JETRL_TEST_BATCH_SIZE" default:"64"`
	Eta          int                `name:"eta" env:"JETRL_TEST_ETA" default:"2"`
	Tasks        []string           `name:"tasks" env:"JETRL_TEST_TASKS" default:"alfworld"`
	TaskWeights  map[string]float64 `name:"task-weights" env:"JETRL_TEST_TASK_WEIGHTS" mapsep:","`
	NoTaskNorm   bool               `name:"no-task-norm" env:"JETRL_TEST_NO_TASK_NORM"`
	Adaptive     bool               `name:"adaptive-tasks" negatable:""`
	Correction   string             `name:"correction" enum:"none,decoupled,truncated" default:"none"`
	GroupTimeout time.Duration      `name:"group-timeout" default:"2m"`
	Seed         uint64             `name:"seed" default:"1"`
	Clip         float64            `name:"clip" default:"0.2"`
	Private      string             `name:"private" default:"mine" runconfig:"-"`
}

func record(t *testing.T, text string) RunConfig {
	t.Helper()
	rc, err := ParseRunConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestRunConfigPrecedence(t *testing.T) {
	const rec = `{"batch_size": 32, "eta": 4, "clip": 0.3}`
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		expected [3]any // batch size, eta, clip
		taken    []string
	}{
		{"run config beats default", nil, nil, [3]any{32, 4, 0.3}, []string{"batch_size", "clip", "eta"}},
		{"env beats run config", map[string]string{"JETRL_TEST_BATCH_SIZE": "48"}, nil, [3]any{48, 4, 0.3}, []string{"clip", "eta"}},
		{"command line beats env and run config", map[string]string{"JETRL_TEST_BATCH_SIZE": "48"}, []string{"--batch-size", "16", "--clip=0.1"},
			[3]any{16, 4, 0.1}, []string{"eta"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var cli testCLI
			taken, err := Parse(&cli, c.args, record(t, rec))
			if err != nil {
				t.Fatal(err)
			}
			if got := [3]any{cli.BatchSize, cli.Eta, cli.Clip}; got != c.expected {
				t.Errorf("batch size, eta, clip = %v, expected %v", got, c.expected)
			}
			if got := slices.Sorted(maps.Keys(taken)); !slices.Equal(got, c.taken) {
				t.Errorf("taken %v, expected %v", got, c.taken)
			}
		})
	}
	t.Run("default without the key", func(t *testing.T) {
		var cli testCLI
		if _, err := Parse(&cli, nil, record(t, `{"minutes": 10}`)); err != nil {
			t.Fatal(err)
		}
		if cli.BatchSize != 64 || cli.Eta != 2 || cli.Clip != 0.2 || cli.Correction != "none" {
			t.Errorf("parsed %+v, expected the defaults", cli)
		}
	})
}

func TestRunConfigValues(t *testing.T) {
	var cli testCLI
	taken, err := Parse(&cli, nil, record(t, `{"tasks": ["db", "kg"], "task_weights": {"kg": 0.5, "db": 2}, "adaptive_tasks": true,
		"correction": "truncated", "group_timeout": "45s", "seed": 18446744073709551615, "private": "theirs"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cli.Tasks, []string{"db", "kg"}) || cli.TaskWeights["db"] != 2 || cli.TaskWeights["kg"] != 0.5 || len(cli.TaskWeights) != 2 {
		t.Errorf("tasks %v, weights %v", cli.Tasks, cli.TaskWeights)
	}
	if !cli.Adaptive || cli.Correction != "truncated" || cli.GroupTimeout != 45*time.Second || cli.Seed != 18446744073709551615 {
		t.Errorf("parsed %+v", cli)
	}
	if cli.Private != "mine" {
		t.Errorf("a flag tagged runconfig:\"-\" took %q from the run config", cli.Private)
	}
	if taken["task_weights"] != "db=2,kg=0.5" || taken["tasks"] != "db,kg" {
		t.Errorf("taken %v", taken)
	}

	// A negatable flag given on the command line beats the run config; empty lists and maps are nothing.
	cli = testCLI{}
	if _, err := Parse(&cli, []string{"--no-adaptive-tasks"}, record(t, `{"adaptive_tasks": true, "tasks": [], "task_weights": {}}`)); err != nil {
		t.Fatal(err)
	}
	if cli.Adaptive || !slices.Equal(cli.Tasks, []string{"alfworld"}) || len(cli.TaskWeights) != 0 {
		t.Errorf("parsed %+v", cli)
	}
}

// The normalizer's --no-task-norm takes the negation of `jetrl up`'s task_norm.
func TestRunConfigNegatedBool(t *testing.T) {
	cases := []struct {
		name     string
		rec      string
		env      string
		args     []string
		expected bool
		err      string
	}{
		{"task_norm false turns it off", `{"task_norm": false}`, "", nil, true, ""},
		{"task_norm true keeps it on", `{"task_norm": true}`, "", nil, false, ""},
		{"a no_ key of its own wins", `{"task_norm": true, "no_task_norm": true}`, "", nil, true, ""},
		{"env beats it", `{"task_norm": false}`, "false", nil, false, ""},
		{"command line beats it", `{"task_norm": false}`, "", []string{"--no-task-norm=false"}, false, ""},
		{"not a bool", `{"task_norm": "off"}`, "", nil, false, "task_norm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("JETRL_TEST_NO_TASK_NORM", c.env)
			}
			var cli testCLI
			taken, err := Parse(&cli, c.args, record(t, c.rec))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, expected one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cli.NoTaskNorm != c.expected {
				t.Errorf("no-task-norm %v, expected %v (taken %v)", cli.NoTaskNorm, c.expected, taken)
			}
		})
	}
}

// `jetrl up` records its own nats, log_level and metrics_addr: a process never takes Common's flags, nor
// an identity.
func TestRunConfigSkipsCommonAndIdentity(t *testing.T) {
	var cli testCLI
	taken, err := Parse(&cli, nil, record(t, `{"nats": "nats://elsewhere:4222", "log_level": "debug", "log_pretty": true,
		"metrics_addr": "127.0.0.1:9999", "stream_replicas": 3, "run_config": false, "id": "someone", "help": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 0 {
		t.Errorf("taken %v, expected nothing", taken)
	}
	expected := Common{NATS: "nats://127.0.0.1:4222", LogLevel: "info", MetricsAddr: ":9090", Replicas: 1, RunConfig: true}
	if cli.Common != expected || cli.ID != "" {
		t.Errorf("common %+v id %q, expected %+v and no id", cli.Common, cli.ID, expected)
	}
}

func TestRunConfigBadValues(t *testing.T) {
	for _, c := range []struct{ rec, expected string }{
		{`{"batch_size": "many"}`, "batch-size"},
		{`{"batch_size": 1.5}`, "batch-size"},
		{`{"correction": "sometimes"}`, "correction"},
		{`{"tasks": [["nested"]]}`, "tasks"},
		{`{"eta": {"a": 1}}`, "eta"},
	} {
		var cli testCLI
		_, err := Parse(&cli, nil, record(t, c.rec))
		if err == nil || !strings.Contains(err.Error(), c.expected) {
			t.Errorf("%s: error %v, expected one naming %q", c.rec, err, c.expected)
		}
	}
}

func TestParseRunConfigMalformed(t *testing.T) {
	for _, text := range []string{`[1, 2]`, `not json`, `null`, `{"eta": 1} {"eta": 2}`, `"batch_size: 3"`, ``} {
		_, err := ParseRunConfig([]byte(text))
		if !errors.Is(err, ErrMalformedRunConfig) || !strings.Contains(err.Error(), proto.BucketRun) {
			t.Errorf("%q: error %v, expected ErrMalformedRunConfig naming the bucket", text, err)
		}
	}
}

func embedded(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := bus.Connect(bustest.Ctx(t), srv.URL(), "test", testLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL(), js
}

func TestReadRunConfig(t *testing.T) {
	ctx := bustest.Ctx(t)
	_, js := embedded(t)
	if rc, err := ReadRunConfig(ctx, js); rc != nil || err != nil {
		t.Fatalf("no bucket: %v, %v; expected nothing and no error", rc, err)
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if rc, err := ReadRunConfig(ctx, js); rc != nil || err != nil {
		t.Fatalf("no key: %v, %v; expected nothing and no error", rc, err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, proto.KeyRunConfig, []byte(`{"batch_size": 32}`)); err != nil {
		t.Fatal(err)
	}
	if rc, err := ReadRunConfig(ctx, js); err != nil || rc["batch_size"] == nil {
		t.Fatalf("record: %v, %v", rc, err)
	}
	if _, err := kv.Put(ctx, proto.KeyRunConfig, []byte(`batch_size: 32`)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRunConfig(ctx, js); !errors.Is(err, ErrMalformedRunConfig) {
		t.Fatalf("malformed record: error %v", err)
	}
	if err := kv.Delete(ctx, proto.KeyRunConfig); err != nil {
		t.Fatal(err)
	}
	if rc, err := ReadRunConfig(ctx, js); rc != nil || err != nil {
		t.Fatalf("deleted key: %v, %v; expected nothing and no error", rc, err)
	}
}

// Start, as a service main runs it against a server: the run config in KV fills what flags and env leave
// unset; --no-run-config and JETRL_RUN_CONFIG=false turn that off; a malformed record stops the process.
func TestStartTakesTheRunConfig(t *testing.T) {
	url, js := embedded(t)
	ctx := bustest.Ctx(t)
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		t.Fatal(err)
	}
	put := func(text string) {
		if _, err := kv.Put(ctx, proto.KeyRunConfig, []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	start := func(args ...string) (testCLI, error) {
		var cli testCLI
		args = append([]string{"--nats", url, "--metrics-addr", "", "--log-level", "error"}, args...)
		if _, err := Parse(&cli, args, nil); err != nil {
			t.Fatal(err)
		}
		var seen testCLI
		err := Start("test", &cli, args, func(context.Context, Process) error { seen = cli; return nil }, kong.Exit(func(int) {}))
		return seen, err
	}
	put(`{"batch_size": 32, "eta": 4, "nats": "nats://elsewhere:1", "task_norm": false}`)
	t.Setenv("JETRL_TEST_ETA", "3")
	got, err := start()
	if err != nil {
		t.Fatal(err)
	}
	if got.BatchSize != 32 || got.Eta != 3 || !got.NoTaskNorm || got.NATS != url {
		t.Errorf("batch size %d (expected 32 from KV), eta %d (3 from env), no-task-norm %v (true from KV), nats %s",
			got.BatchSize, got.Eta, got.NoTaskNorm, got.NATS)
	}
	if got, err = start("--batch-size", "8"); err != nil || got.BatchSize != 8 {
		t.Errorf("command line: batch size %d, %v; expected 8", got.BatchSize, err)
	}
	if got, err = start("--no-run-config"); err != nil || got.BatchSize != 64 || got.NoTaskNorm {
		t.Errorf("--no-run-config: batch size %d, no-task-norm %v, %v; expected the defaults", got.BatchSize, got.NoTaskNorm, err)
	}
	t.Setenv("JETRL_RUN_CONFIG", "false")
	if got, err = start(); err != nil || got.BatchSize != 64 {
		t.Errorf("JETRL_RUN_CONFIG=false: batch size %d, %v; expected the default", got.BatchSize, err)
	}
	t.Setenv("JETRL_RUN_CONFIG", "true")

	put(`{"batch_size": "lots"}`)
	if _, err := start(); err == nil || !strings.Contains(err.Error(), "run config") || !strings.Contains(err.Error(), "batch-size") {
		t.Errorf("a value that does not parse: error %v, expected one naming the run config and the flag", err)
	}
	put(`[1, 2, 3]`)
	if _, err := start(); !errors.Is(err, ErrMalformedRunConfig) {
		t.Errorf("malformed record: error %v, expected ErrMalformedRunConfig", err)
	}
}

func testLog() zerolog.Logger { return zerolog.Nop() }
