package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An interrupt ends `jetrl up`'s training early, and the run still evaluates the policy as it is and
// writes its results, marked interrupted; `jetrl report` does not take such a run as finished.
func TestUpInterruptWritesResults(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process signals as on Linux")
	}
	bin := binaries(t)
	out := t.TempDir()
	var stdout, stderr strings.Builder
	cmd := exec.Command(filepath.Join(bin, "jetrl"), "up", "--tasks", "os", "--minutes", "5", "--eval-episodes", "20",
		"--eval-every", "0", "--metrics-addr", "", "--quiet", "--out", out)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Interrupt once training has applied a few batches (metrics.jsonl gets a "train" point per version).
	eventually(t, 2*time.Minute, "training to start", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
		return strings.Count(string(b), `"kind":"train"`) >= 3
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("jetrl up after one interrupt: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("jetrl up did not finish within 2 minutes of an interrupt\nstderr:\n%s", stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatalf("no summary after an interrupt: %v", err)
	}
	var sum struct {
		Interrupted     bool    `json:"interrupted"`
		EpisodesTrained int64   `json:"episodes_trained"`
		WallSeconds     float64 `json:"wall_seconds"`
		EvalsDone       *int    `json:"heldout_evals_during_training"`
		EvalsFailed     *int    `json:"heldout_evals_failed"`
		Tasks           map[string]struct {
			EvalEpisodes int `json:"eval_episodes"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if !sum.Interrupted || sum.EpisodesTrained == 0 || sum.WallSeconds >= 300 || sum.Tasks["os"].EvalEpisodes != 20 {
		t.Fatalf("summary %+v: want interrupted, some episodes trained, under the 5-minute budget, 20 held-out episodes of os", sum)
	}
	if sum.EvalsDone == nil || sum.EvalsFailed == nil || *sum.EvalsDone != 0 || *sum.EvalsFailed != 0 {
		t.Errorf("summary's held-out evaluations during training %v done, %v failed: want both present and 0 (--eval-every 0)", sum.EvalsDone, sum.EvalsFailed)
	}
	if _, err := os.Stat(filepath.Join(out, "weights.bin")); err != nil {
		t.Fatalf("no weights after an interrupt: %v", err)
	}
	if !strings.Contains(stdout.String(), "interrupted after") {
		t.Errorf("stdout does not say the run was interrupted:\n%s", stdout.String())
	}
}
