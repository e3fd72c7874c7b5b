package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/config"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/policy"
)

// runJetrl parses args as the jetrl binary does and runs the command, returning what it printed.
func runJetrl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Configuration(loadRunConfig), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := p.Parse(args)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	c.Config.Set.out, c.Config.Show.out = &out, &out
	err = ctx.Run(&globals{})
	return out.String(), err
}

// serviceCLI is a service process's command line as the mains declare it.
type serviceCLI struct {
	config.Common
	ID         string  `name:"id"`
	BatchSize  int     `name:"batch-size" default:"64"`
	Eta        int     `name:"eta" env:"JETRL_TEST_SERVICE_ETA" default:"2"`
	Correction string  `name:"correction" enum:"none,decoupled,truncated" default:"none"`
	Clip       float64 `name:"clip" default:"0.2"`
	NoTaskNorm bool    `name:"no-task-norm"`
	Tasks      []string
	Weights    map[string]float64 `name:"task-weights" mapsep:","`
}

// jetrl config set validates as jetrl up does and writes the run config; a service process takes it;
// jetrl config show prints it as YAML that loads back; jetrl status reads it.
func TestConfigSetShow(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.URL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := runJetrl(t, "config", "show", "--nats", url); err == nil || !strings.Contains(err.Error(), "no run config") {
		t.Fatalf("show before any set: error %v, expected one saying there is no run config", err)
	}

	file := filepath.Join(t.TempDir(), "run.yaml")
	yamlText := "batch_size: 32\ntasks: [alfworld, kg]\ntask_weights: {kg: 2}\ncorrection: truncated\ntask_norm: false\neta: 4\n"
	if err := os.WriteFile(file, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runJetrl(t, "config", "set", "--nats", url, "--config", file, "--eta", "3", "--clip", "0.25")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "wrote") {
		t.Errorf("set printed %q", out)
	}

	log, _ := logging.New("test", "error", false, nil)
	nc, err := bus.Connect(ctx, url, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := config.ReadRunConfig(ctx, js)
	if err != nil || rc == nil {
		t.Fatalf("run config %v, %v", rc, err)
	}
	var svc serviceCLI
	taken, err := config.Parse(&svc, []string{"--batch-size", "16"}, rc)
	if err != nil {
		t.Fatal(err)
	}
	if svc.BatchSize != 16 || svc.Eta != 3 || svc.Correction != "truncated" || svc.Clip != 0.25 || !svc.NoTaskNorm ||
		!slices.Equal(svc.Tasks, []string{"alfworld", "kg"}) || svc.Weights["kg"] != 2 {
		t.Errorf("the service took %+v (taken %v)", svc, taken)
	}
	if svc.NATS != "nats://127.0.0.1:4222" || svc.LogLevel != "info" || svc.MetricsAddr != ":9090" {
		t.Errorf("the service took its own settings from the run config: %+v", svc.Common)
	}

	status, err := runSettings(ctx, nc)
	if err != nil || !bytes.Contains(status, []byte(`"batch_size": 32`)) {
		t.Errorf("jetrl status reads %s, %v", status, err)
	}

	shown, err := runJetrl(t, "config", "show", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(shown, "# run config: KV jetrl_run/config, revision") || !strings.Contains(shown, "\nbatch_size: 32\n") {
		t.Errorf("show printed:\n%s", shown)
	}
	reloaded, err := parseUp(t, shown)
	if err != nil {
		t.Fatalf("the shown YAML does not load with jetrl up --config: %v\n%s", err, shown)
	}
	if reloaded.BatchSize != 32 || reloaded.Eta != 3 || reloaded.Clip != 0.25 || reloaded.TaskNorm || reloaded.TaskWeights["kg"] != 2 {
		t.Errorf("reloaded %+v", reloaded)
	}

	// Invalid settings are refused and nothing is written.
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, proto.KeyRunConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--clip", "1.5"}, {"--tasks", "nosuch"}, {"--batch-size", "12"}, {"--correction", "sometimes"}} {
		if _, err := runJetrl(t, append([]string{"config", "set", "--nats", url}, bad...)...); err == nil {
			t.Errorf("config set %v: no error", bad)
		}
	}
	after, err := kv.Get(ctx, proto.KeyRunConfig)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision() != before.Revision() {
		t.Errorf("refused settings were written (revision %d, was %d)", after.Revision(), before.Revision())
	}
}

// A pool checkpoint file goes to the weights Object Store; the rollout's --checkpoint and
// --checkpoint-prob come from the record.
func TestConfigSetPoolCheckpoint(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	dir := t.TempDir()
	model, err := policy.New(policy.Config{Seed: 1, Bits: 10, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := model.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runJetrl(t, "config", "set", "--nats", srv.URL(), "--pool-checkpoint", weights, "--pool-checkpoint-prob", "0.2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "pool/") {
		t.Errorf("set printed %q", out)
	}
	shown, err := runJetrl(t, "config", "show", "--nats", srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown, "\ncheckpoint: pool/") || !strings.Contains(shown, "\ncheckpoint_prob: 0.2\n") {
		t.Errorf("show printed:\n%s", shown)
	}
}
