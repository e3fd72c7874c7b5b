package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/benchtask"
	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/rs/zerolog"
)

// jetrl status --watch against a training mesh on an embedded server: every replica of every stage gets a
// line (env hosts from their micro stats), the rates since the previous sample are those of a mesh at work,
// and the three stages' consumers report their backlog.
func TestStatusWatchShowsRatesAndBacklog(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tcfg := trainer.DefaultConfig()
	tcfg.Model = policy.Config{Bits: 10, Seed: 1}
	m, err := mesh.Start(ctx, mesh.Config{
		NATSURL: srv.URL(), Tasks: []string{benchtask.ZeroName}, Seed: 1, GroupSize: 4, BatchSize: 16, Eta: 2, EnvHosts: 2,
		Trainer: tcfg, Normalizer: normalizer.DefaultConfig(), Rollout: rollout.Config{Concurrency: 16},
		Families: task.Registry{benchtask.ZeroName: benchtask.NewZero(4)}, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if err := m.WaitVersion(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.StartRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitVersion(ctx, 2); err != nil {
		t.Fatal(err)
	}
	nc, err := bus.Connect(ctx, srv.URL(), "jetrl-status-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}

	c := &statusCmd{Wait: 1500 * time.Millisecond, Watch: 2 * time.Second, Count: 3, JSON: true} // replicas answer late on a busy machine
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.watch(ctx, nc, js, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d samples, want 3:\n%s", len(lines), out.String())
	}
	var first, last watchJSON
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	for _, r := range first.Rows {
		if r.Rates != nil {
			t.Errorf("first sample: %s %s has rates %v, want none (nothing to compare with)", r.Service, r.ID, r.Rates)
		}
	}
	count := map[string]int{}
	for _, r := range last.Rows {
		count[r.Service]++
		lead := watchRates[r.Service][0]
		if r.Service == "env" {
			if r.Rates[lead] <= 0 {
				t.Errorf("env host %s: %v requests/s, want some (the two hosts share the work)", r.ID, r.Rates[lead])
			}
			continue
		}
		if r.Rates[lead] <= 0 && r.Service != "advantage-normalizer" {
			t.Errorf("%s %s: rates %v, want a positive %s", r.Service, r.ID, r.Rates, lead)
		}
	}
	for svc, want := range map[string]int{"env": 2, "rollout": 1, "replay-buffer": 1, "advantage-normalizer": 1, "trainer": 1} {
		if count[svc] != want {
			t.Errorf("%d %s rows, want %d: %s", count[svc], svc, want, lines[2])
		}
	}
	if len(last.Backlog) != len(backlogStages) {
		t.Fatalf("backlog %+v, want the %d stages", last.Backlog, len(backlogStages))
	}
	for _, b := range last.Backlog {
		if b.Error != "" {
			t.Errorf("backlog of %s: %s", b.Consumer, b.Error)
		}
	}

	// Without --watch: every replica of the four status services with its counters, all asked at once;
	// with --json one object per replica.
	var once bytes.Buffer
	if err := (&statusCmd{Wait: 1500 * time.Millisecond}).once(ctx, nc, &once); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rollout ", "replay-buffer ", "advantage-normalizer ", "trainer ", "episodes_published", "batches_released", "policy_version"} {
		if !strings.Contains(once.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, once.String())
		}
	}
	if strings.Contains(once.String(), "no replica answered") {
		t.Errorf("a service did not answer:\n%s", once.String())
	}
	once.Reset()
	if err := (&statusCmd{Wait: 1500 * time.Millisecond, JSON: true}).once(ctx, nc, &once); err != nil {
		t.Fatal(err)
	}
	services := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(once.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if svc, ok := r["service"].(string); ok {
			services[svc]++
		}
	}
	for _, svc := range statusServices {
		if services[svc] != 1 {
			t.Errorf("%d JSON lines of %s, want 1:\n%s", services[svc], svc, once.String())
		}
	}

	// The table: a header with the sample's time, a line per replica with its rates, the backlog line.
	var table bytes.Buffer
	c.JSON, c.Count = false, 2
	if err := c.watch(ctx, nc, js, &table); err != nil {
		t.Fatal(err)
	}
	text := table.String()
	t.Log("\n" + text)
	for _, want := range []string{"REPLICA", "RATE", "episodes/s", "versions/s", "requests/s", "busy ", "backlog", "JETRL_EPISODES", "JETRL_TRAIN"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
}

func TestStatusFlagsAreChecked(t *testing.T) {
	for _, c := range []statusCmd{
		{Wait: 0},
		{Wait: time.Second, Watch: -time.Second},
		{Wait: time.Second, Watch: time.Second},
		{Wait: time.Second, Count: 2},
		{Wait: time.Second, Watch: 2 * time.Second, Count: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (&statusCmd{Wait: 500 * time.Millisecond, Watch: 2 * time.Second, Count: 3}).Validate(); err != nil {
		t.Error(err)
	}
}
