package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/rs/zerolog"
)

// A held-out evaluation during training that fails is logged with its version and counted; one that
// succeeds is a point of the metrics file; a point that cannot be written is an error, as a training
// point's is.
func TestUpPeriodicEvalsRecordFailuresAndWriteErrors(t *testing.T) {
	dir := t.TempDir()
	metrics, err := runout.OpenMetrics(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	evals := &periodicEvals{metrics: metrics, progress: newProgress(time.Minute, true), log: zerolog.New(&logged)}

	ok, err := evals.record(evalOutcome{version: 7, at: time.Second, err: errors.New("env hosts gone")}, 100)
	if ok || err != nil {
		t.Fatalf("failed evaluation: %v, %v; want not ok and no error", ok, err)
	}
	if evals.failed != 1 || evals.progress.failedEvals != 1 {
		t.Errorf("failed %d, on the progress display %d; want 1", evals.failed, evals.progress.failedEvals)
	}
	if l := logged.String(); !strings.Contains(l, `"level":"warn"`) || !strings.Contains(l, `"version":7`) || !strings.Contains(l, "env hosts gone") {
		t.Errorf("log %q: want a warning with the version and the error", l)
	}

	res := map[string]rollout.EvalResult{"alfworld": {Success: 0.5, MeanReward: 0.4, Episodes: 20}}
	ok, err = evals.record(evalOutcome{res: res, version: 9, at: 2 * time.Second}, 200)
	if !ok || err != nil {
		t.Fatalf("evaluation: %v, %v; want ok and no error", ok, err)
	}
	if evals.done != 1 || !strings.Contains(evals.progress.heldout, "alfworld 50%") {
		t.Errorf("recorded %d, progress %q; want 1 and the held-out success", evals.done, evals.progress.heldout)
	}
	if err := metrics.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, runout.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"version":9`) {
		t.Errorf("metrics file %q: want the one successful evaluation", b)
	}

	// The file is closed now: the next point cannot be written.
	if ok, err := evals.record(evalOutcome{res: res, version: 10, at: 3 * time.Second}, 300); ok || err == nil {
		t.Errorf("point not written: %v, %v; want an error", ok, err)
	}
}
