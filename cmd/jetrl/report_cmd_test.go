package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
)

// A resumed report keeps finished runs and runs again those that are missing or were interrupted.
func TestReportResumeSkipsOnlyFinishedRuns(t *testing.T) {
	c := &reportCmd{Out: t.TempDir(), Tasks: []string{"db", "os"}, Methods: []string{"full", "single"}, Seeds: 1,
		Minutes: 1, SingleMinutes: 1, SingleTarget: 0.99, EvalEpisodes: 20, Resume: true}
	plan := c.plan()
	if len(plan) != 3 {
		t.Fatalf("plan has %d runs, want 3 (full, single-db, single-os)", len(plan))
	}
	write := func(r reportRun, s runout.Summary) {
		t.Helper()
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := runout.WriteJSON(r.dir, runout.SummaryFile, s); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.dir, runout.MetricsFile), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(plan[0], runout.Summary{Seed: 1})
	write(plan[1], runout.Summary{Seed: 1, Interrupted: true})
	var done []bool
	for _, r := range plan {
		done = append(done, c.done(r))
	}
	if want := []bool{true, false, false}; !slices.Equal(done, want) {
		t.Fatalf("done = %v, want %v (finished, interrupted, missing)", done, want)
	}
	// Single-family runs stop at their ceiling; multi-task runs train their whole budget.
	if !slices.Contains(plan[1].args, "--target") || slices.Contains(plan[0].args, "--target") {
		t.Fatalf("args: full %v, single %v; want --target on single-family runs only", plan[0].args, plan[1].args)
	}
	c.Resume = false
	if c.done(plan[0]) {
		t.Fatal("without --resume a finished run counts as done")
	}
}
