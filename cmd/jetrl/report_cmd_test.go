package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/report"
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

// report --merge joins the tables of earlier reports without running anything.
func TestReportMergeJoinsEarlierReports(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, runs []report.Run) string {
		t.Helper()
		rep, err := report.Build([]string{"db"}, runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := runout.WriteJSON(sub, "report.json", rep); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(sub, "report.json")
	}
	summary := func(after float64) runout.Summary {
		return runout.Summary{Seed: 1, Tasks: map[string]runout.TaskSummary{"db": {HeldoutSuccessAfter: after, HeldoutMeanRewardAfter: after}}}
	}
	a := write("a", []report.Run{{Method: report.Full, Seed: 1, Summary: summary(0.9)}, {Method: "single-db", Seed: 1, Summary: summary(0.93)}})
	b := write("b", []report.Run{{Method: report.NoTaskNorm, Seed: 1, Summary: summary(0.7)}, {Method: report.NoCrossPolicy, Seed: 1, Summary: summary(0.6)}})
	out := filepath.Join(dir, "merged")
	c := &reportCmd{Out: out, Merge: []string{a, b}, Command: "jetrl report --merge a --merge b"}
	if err := c.Run(nil); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| full method (all families together) | 1 | 90.0", "| without task advantage normalization | 1 | 70.0",
		"| each family trained alone | 1 | 93.0", "db -3.0;", "These runs reproduce that direction", "`jetrl report --merge a --merge b`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("merged report lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err != nil {
		t.Fatal(err)
	}
	if err := (&reportCmd{Out: out, Merge: []string{filepath.Join(dir, "nope.json")}}).Run(nil); err == nil {
		t.Fatal("a missing report merged without an error")
	}
}
