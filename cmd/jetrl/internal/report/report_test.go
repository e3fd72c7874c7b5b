package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
)

func TestNewStat(t *testing.T) {
	tests := []struct {
		name     string
		given    []float64
		expected Stat
		wantErr  bool
	}{
		{"three seeds", []float64{0.8, 0.9, 1.0}, Stat{Mean: 0.9, Std: 0.1, N: 3}, false},
		{"one seed has no spread", []float64{0.7}, Stat{Mean: 0.7, N: 1}, false},
		{"all equal", []float64{0.5, 0.5}, Stat{Mean: 0.5, N: 2}, false},
		{"empty", nil, Stat{}, true},
		{"NaN", []float64{0.5, math.NaN()}, Stat{}, true},
		{"infinite", []float64{math.Inf(1)}, Stat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewStat(tc.given)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if math.Abs(got.Mean-tc.expected.Mean) > 1e-12 || math.Abs(got.Std-tc.expected.Std) > 1e-12 || got.N != tc.expected.N {
				t.Fatalf("NewStat(%v) = %+v, want %+v", tc.given, got, tc.expected)
			}
		})
	}
}

// run makes a finished run whose held-out success after training is given per task (before: 0.01).
func run(method string, seed uint64, after map[string]float64) Run {
	s := runout.Summary{Seed: seed, Tasks: map[string]runout.TaskSummary{}}
	var pts []runout.Point
	for i := 1; i <= 3; i++ {
		p := runout.Point{Kind: "eval", Seconds: 30 * float64(i), Tasks: map[string]runout.TaskPoint{}}
		for task, a := range after {
			p.Tasks[task] = runout.TaskPoint{Success: a * float64(i) / 3}
		}
		pts = append(pts, p)
	}
	for task, a := range after {
		s.Tasks[task] = runout.TaskSummary{HeldoutSuccessBefore: 0.01, HeldoutSuccessAfter: a, HeldoutMeanRewardAfter: a}
	}
	return Run{Method: method, Seed: seed, Summary: s, Points: pts}
}

func TestBuildAggregatesSeedsAblationsAndSingles(t *testing.T) {
	tasks := []string{"db", "os"}
	runs := []Run{
		run(Full, 1, map[string]float64{"db": 0.9, "os": 0.8}),
		run(Full, 2, map[string]float64{"db": 1.0, "os": 0.6}),
		run(NoTaskNorm, 1, map[string]float64{"db": 0.8, "os": 0.5}),
		run(NoCrossPolicy, 1, map[string]float64{"db": 0.9, "os": 0.9}),
		run("single-db", 1, map[string]float64{"db": 0.97}),
		run("single-os", 1, map[string]float64{"os": 0.6}),
	}
	r, err := Build(tasks, runs, map[string]Baseline{"random": {Success: map[string]float64{"db": 0.02, "os": 0}}})
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, row := range r.Rows {
		methods = append(methods, row.Method)
	}
	if strings.Join(methods, ",") != "full,no-task-norm,no-cross-policy,single" {
		t.Fatalf("rows %v", methods)
	}
	full := r.Rows[0]
	if full.Seeds != 2 || math.Abs(full.Success["db"].Mean-0.95) > 1e-12 || math.Abs(full.Success["os"].Std-math.Sqrt(0.02)) > 1e-12 {
		t.Fatalf("full row %+v", full)
	}
	if math.Abs(full.Mean-(0.95+0.7)/2) > 1e-12 {
		t.Fatalf("full mean %v", full.Mean)
	}
	single := r.Rows[3]
	if single.Success["db"].Mean != 0.97 || single.Success["os"].Mean != 0.6 {
		t.Fatalf("single row %+v: each column must come from that family's own run", single)
	}
	if g := r.GapToSingle["db"]; math.Abs(g-(-2)) > 1e-9 {
		t.Fatalf("db gap %v, want -2 points", g)
	}
	if g := r.GapToSingle["os"]; math.Abs(g-10) > 1e-9 {
		t.Fatalf("os gap %v, want +10 points", g)
	}
	// Full 0.825 against no-task-norm 0.65 and no-cross-policy 0.9: not the paper's direction.
	if r.PaperDirection {
		t.Fatal("paper direction claimed although no-cross-policy beats the full method")
	}
	if r.Untrained.Success["db"] != 0.01 {
		t.Fatalf("untrained %v", r.Untrained)
	}
	md := r.Markdown("jetrl report --seeds 2")
	for _, want := range []string{"| full method (all families together) | 2 | 95.0 ± 7.1 | 70.0 ± 14.1 |", "| random policy | – | 2.0 | 0.0 |",
		"db -2.0; os +10.0; the multi-task model is within 5 points", "do not reproduce that direction", "`jetrl report --seeds 2`"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	runs[3] = run(NoCrossPolicy, 1, map[string]float64{"db": 0.5, "os": 0.5})
	runs[4] = run("single-db", 1, map[string]float64{"db": 1.0})
	r, err = Build(tasks, runs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.PaperDirection {
		t.Fatal("full beats both ablations but the paper's direction is not reported")
	}
	if md := r.Markdown(""); !strings.Contains(md, "NOT within 5 points") || !strings.Contains(md, "reproduce that direction") {
		t.Fatalf("markdown:\n%s", md)
	}
}

func TestBuildRejectsNaN(t *testing.T) {
	bad := run(Full, 1, map[string]float64{"db": math.NaN()})
	if _, err := Build([]string{"db"}, []Run{bad}, nil); err == nil || !strings.Contains(err.Error(), "full db") {
		t.Fatalf("NaN success: %v", err)
	}
}

func TestCurvesAverageSeedsAndPlot(t *testing.T) {
	runs := []Run{run(Full, 1, map[string]float64{"db": 0.9}), run(Full, 2, map[string]float64{"db": 0.3}), run("single-db", 1, map[string]float64{"db": 0.6})}
	c := Curves([]string{"db"}, runs)["db"]
	if len(c) != 2 || c[0].Method != Full || c[1].Method != Single {
		t.Fatalf("curves %+v", c)
	}
	if last := c[0].XY[len(c[0].XY)-1]; math.Abs(last.Y-0.6) > 1e-12 || last.X != 90 {
		t.Fatalf("last full point %+v, want (90, 0.6)", last)
	}
	path := filepath.Join(t.TempDir(), "curves.png")
	if err := Plot(path, []string{"db"}, runs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("curves.png: %d bytes, err %v", len(b), err)
	}
	if err := Plot(path, []string{"kg"}, runs); err == nil {
		t.Fatal("plot without any evaluation succeeded")
	}
}

// Reports of separate invocations (full method and singles in one, ablations in another) merge into one
// table whose comparisons are made over the joined rows; a later report's row of a method replaces an
// earlier one's.
func TestMergeJoinsReportsOfSeparateRuns(t *testing.T) {
	tasks := []string{"db", "os"}
	first, err := Build(tasks, []Run{
		run(Full, 1, map[string]float64{"db": 0.9, "os": 0.8}),
		run(NoTaskNorm, 1, map[string]float64{"db": 0.1, "os": 0.1}), // replaced by the second report's row
		run("single-db", 1, map[string]float64{"db": 0.92}),
		run("single-os", 1, map[string]float64{"os": 0.9}),
	}, map[string]Baseline{"solver": {Success: map[string]float64{"db": 1, "os": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(tasks, []Run{
		run(NoTaskNorm, 1, map[string]float64{"db": 0.8, "os": 0.7}),
		run(NoCrossPolicy, 1, map[string]float64{"db": 0.85, "os": 0.6}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second.Untrained.Success["db"] = 0.03
	merged, err := Merge([]Report{first, second}, "rows from two runs")
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, row := range merged.Rows {
		methods = append(methods, row.Method)
	}
	if strings.Join(methods, ",") != "full,no-task-norm,no-cross-policy,single" {
		t.Fatalf("rows %v", methods)
	}
	if ntn := merged.Rows[1]; ntn.Success["db"].Mean != 0.8 {
		t.Fatalf("no-task-norm row %+v, want the second report's", ntn)
	}
	if !merged.PaperDirection {
		t.Fatal("full (0.85) beats both ablations (0.75, 0.725) but the merge does not say so")
	}
	if g := merged.GapToSingle["os"]; math.Abs(g-(-10)) > 1e-9 {
		t.Fatalf("os gap %v, want -10 points", g)
	}
	if u := merged.Untrained.Success["db"]; math.Abs(u-0.02) > 1e-12 {
		t.Fatalf("untrained db %v, want the mean of 0.01 and 0.03", u)
	}
	if _, ok := merged.Baselines["solver"]; !ok || merged.Notes != "rows from two runs" {
		t.Fatalf("baselines %v, notes %q", merged.Baselines, merged.Notes)
	}
	if _, err := Merge([]Report{first, {Tasks: []string{"db"}}}, ""); err == nil {
		t.Fatal("reports of other families merged")
	}
	if _, err := Merge(nil, ""); err == nil {
		t.Fatal("nothing merged without an error")
	}
}
