package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/shared/bus"
)

// TestServicesTakeTheRunConfig writes a run config with `jetrl config set` and starts service processes
// that take from it every setting their command line and environment leave unset.
func TestServicesTakeTheRunConfig(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process signals as on Linux")
	}
	dir := t.TempDir()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.URL()
	set := exec.Command(filepath.Join(binaries(t), "jetrl"), "config", "set", "--nats", url,
		"--batch-size", "32", "--max-batch-size", "48", "--eta", "4", "--correction", "truncated", "--is-cap", "1.5", "--no-task-norm")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("jetrl config set: %v\n%s", err, out)
	}

	t.Setenv("JETRL_ETA", "3") // the environment beats the run config
	common := []string{"--nats", url, "--metrics-addr", "127.0.0.1:0"}
	buf := start(t, dir, "replay-buffer", common...)
	trainer := start(t, dir, "trainer", append(common, "--clip", "0.3")...) // the command line beats it
	norm := start(t, dir, "advantage-normalizer", common...)

	taken := func(p *proc, started string) (map[string]any, map[string]any) {
		var settings, startLine map[string]any
		eventually(t, 60*time.Second, p.name+" to start", func() bool {
			settings, startLine = nil, nil
			for _, line := range logLines(p.log) {
				if s, ok := line["settings"].(map[string]any); ok {
					settings = s
				}
				if line["message"] == started {
					startLine = line
				}
			}
			return startLine != nil
		})
		if settings == nil {
			t.Fatalf("%s logged no settings taken from the run config; log:\n%s", p.name, tail(p.log))
		}
		return settings, startLine
	}

	s, started := taken(buf, "replay-buffer started")
	if s["batch_size"] != "32" || s["max_batch_size"] != "48" || s["eta"] != nil || s["nats"] != nil || s["metrics_addr"] != nil {
		t.Errorf("replay-buffer took %v; expected batch_size 32 and max_batch_size 48, not eta (env), nats or metrics_addr", s)
	}
	if started["batch"] != 32.0 || started["eta"] != 3.0 {
		t.Errorf("replay-buffer started with batch %v eta %v; expected 32 (run config) and 3 (env)", started["batch"], started["eta"])
	}
	s, _ = taken(trainer, "trainer started")
	if s["correction"] != "truncated" || s["is_cap"] != "1.5" || s["entropy_coef"] != "0.01" || s["clip"] != nil || s["eta"] != nil {
		t.Errorf("trainer took %v; expected correction truncated, is_cap 1.5, entropy_coef 0.01, not clip (command line) or eta (env)", s)
	}
	s, started = taken(norm, "advantage-normalizer started")
	if s["no_task_norm"] != "true" || s["abnormal_reward"] != "-0.2" || started["task_norm"] != false {
		t.Errorf("advantage-normalizer took %v; expected no_task_norm true (from task_norm false) and abnormal_reward -0.2", s)
	}
	for _, p := range []*proc{buf, trainer, norm} {
		p.stop(t, 20*time.Second)
	}
}

// logLines reads a process's zerolog JSON lines.
func logLines(path string) []map[string]any {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if strings.HasPrefix(sc.Text(), "{") && json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
