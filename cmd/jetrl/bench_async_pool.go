package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// poolAsyncResults reads earlier bench async-vs-sync --json outputs and summarises all their pairs as one
// run with those pairs would have: the paired held-out interval over every pair, the means of the rates and
// busy fractions, the largest staleness. A seed may appear more than once (repeats are pairs of their own).
// The runs' workloads must agree on every setting but the seed; their epochs may differ only where each run
// chose its own by calibration. An input may itself be a pooled output: its runs count as runs, and a file
// it holds may not be given again.
func poolAsyncResults(paths []string) (*asyncBenchResult, error) {
	var first, out *asyncBenchResult
	var errs []error
	var runs []int        // pairs per run, in order
	var runFiles []string // each run's file (a pooled input's runs are its own runs)
	type from struct {
		input  string
		pooled bool
	}
	inputOf := map[string]from{} // each original file (by base name): the input it came in
	var overlaps []string
	epochs := map[int]bool{}
	given := false // a run that did not calibrate its epochs is among them
	for _, path := range paths {
		res, err := readAsyncResult(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if first == nil {
			first = res
			out = &asyncBenchResult{Eta: res.Eta, Workload: res.Workload}
			out.Workload.Calibration, out.Workload.PooledFrom = nil, nil
		} else if err := sameAsyncWorkload(first, res); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		for _, p := range res.Pairs {
			if p.Epochs == 0 { // written before pairs recorded their epochs: the run's
				p.Epochs = res.Workload.Epochs
			}
			epochs[p.Epochs] = true
		}
		given = given || !ranCalibrated(res)
		pooled := len(res.Workload.PooledFrom) > 0
		originals := []string{path}
		if pooled {
			originals = res.Workload.PooledFrom
		}
		for _, o := range originals {
			// The same file given twice is two runs of its seeds (repeats are pairs of their own); a file
			// that a pooled input already holds, given again, would count its pairs twice unawares.
			if in, seen := inputOf[filepath.Base(o)]; seen && (pooled || in.pooled) {
				overlaps = append(overlaps, fmt.Sprintf("%s (in %s and in %s)", filepath.Base(o), in.input, path))
			}
			inputOf[filepath.Base(o)] = from{input: path, pooled: pooled}
		}
		out.Pairs = append(out.Pairs, res.Pairs...)
		out.Workload.PooledFrom = append(out.Workload.PooledFrom, originals...)
		if r := res.HeldOutRuns; pooled && r != nil && sumPairs(r.Runs) == len(res.Pairs) {
			for _, run := range r.Runs {
				runs, runFiles = append(runs, run.Pairs), append(runFiles, run.From)
			}
		} else {
			runs, runFiles = append(runs, len(res.Pairs)), append(runFiles, path)
		}
	}
	if len(overlaps) > 0 {
		errs = append(errs, fmt.Errorf("pairs would count twice: %s", strings.Join(overlaps, "; ")))
	}
	if given && len(epochs) > 1 {
		errs = append(errs, fmt.Errorf("runs of given epochs pool only with runs of the same epochs; these have %v", slices.Sorted(maps.Keys(epochs))))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(epochs) > 1 {
		out.Workload.Epochs = 0
		if out.Workload.LREpochs > 0 { // the learning rate follows the epochs
			out.Workload.LearningRate = 0
		}
	}
	out.Workload.Calibrated = !given
	if err := out.summarize(); err != nil {
		return nil, fmt.Errorf("pooling %s: %w", strings.Join(paths, ", "), err)
	}
	out.HeldOutRuns = compareRuns(runFiles, runs, out.Pairs)
	return out, nil
}

func sumPairs(runs []heldOutRun) int {
	n := 0
	for _, r := range runs {
		n += r.Pairs
	}
	return n
}

// heldOutRuns compares the async - sync held-out differences of pooled runs: a one-way analysis of
// variance with the runs as groups. F is the spread of the runs' means over what the spread of pairs
// within each run predicts for it (about 1 when the runs differ by chance alone); P is the chance of an F
// at least as large if they do (F distribution with DF1 = runs - 1 and DF2 = pairs - runs degrees of
// freedom). CurveF and CurveP are the same for the differences along the window (the curve's mean after
// its start), when every pair has a curve. Comparing the runs before a change with those after it, with a
// t interval of their own, is the test to use when the change is known in advance; this one asks whether
// any run stands out.
type heldOutRuns struct {
	Runs   []heldOutRun `json:"runs"`
	F      float64      `json:"f"`
	DF1    int          `json:"df1"`
	DF2    int          `json:"df2"`
	P      float64      `json:"p"`
	CurveF *float64     `json:"curve_f,omitempty"`
	CurveP *float64     `json:"curve_p,omitempty"`
}

// heldOutRun is one pooled run: its file, its pairs, and their mean async - sync held-out difference at
// the end of the window and along it (with a curve).
type heldOutRun struct {
	From      string   `json:"from"`
	Pairs     int      `json:"pairs"`
	Mean      float64  `json:"mean"`
	CurveMean *float64 `json:"curve_mean,omitempty"`
}

// compareRuns is heldOutRuns for pairs pooled from the runs in from, sizes[i] pairs from from[i], in
// order; nil with fewer than two runs, or with no pair within a run differing from its run's mean (the
// comparison needs a spread within runs to measure the runs' spread by).
func compareRuns(from []string, sizes []int, pairs []*asyncPair) *heldOutRuns {
	if len(from) < 2 || len(from) != len(sizes) {
		return nil
	}
	end := make([]float64, len(pairs))
	var curve []float64
	for i, p := range pairs {
		end[i] = p.HeldOutAsync - p.HeldOutSync
		if p.HeldOutCurveAsync != nil && p.HeldOutCurveSync != nil {
			curve = append(curve, *p.HeldOutCurveAsync-*p.HeldOutCurveSync)
		}
	}
	means, f, pv, ok := oneWay(sizes, end)
	if !ok {
		return nil
	}
	out := &heldOutRuns{F: f, P: pv, DF1: len(sizes) - 1, DF2: len(pairs) - len(sizes)}
	for r, n := range sizes {
		out.Runs = append(out.Runs, heldOutRun{From: from[r], Pairs: n, Mean: means[r]})
	}
	if len(curve) == len(pairs) {
		if cm, cf, cp, ok := oneWay(sizes, curve); ok {
			out.CurveF, out.CurveP = &cf, &cp
			for r := range out.Runs {
				out.Runs[r].CurveMean = &cm[r]
			}
		}
	}
	return out
}

// oneWay is the one-way analysis of variance of vals in groups of sizes (in order): the groups' means, F and
// its p-value; ok is false without a second group, a degree of freedom within groups, or a spread within.
func oneWay(sizes []int, vals []float64) (means []float64, f, p float64, ok bool) {
	df1, df2 := len(sizes)-1, len(vals)-len(sizes)
	if df1 < 1 || df2 < 1 {
		return nil, 0, 0, false
	}
	var all float64
	for _, v := range vals {
		all += v / float64(len(vals))
	}
	var between, within float64
	i := 0
	for _, n := range sizes {
		var mean float64
		for _, v := range vals[i : i+n] {
			mean += v / float64(n)
		}
		for _, v := range vals[i : i+n] {
			within += (v - mean) * (v - mean)
		}
		between += float64(n) * (mean - all) * (mean - all)
		means = append(means, mean)
		i += n
	}
	if within == 0 {
		return nil, 0, 0, false
	}
	f = (between / float64(df1)) / (within / float64(df2))
	return means, f, distuv.F{D1: float64(df1), D2: float64(df2)}.Survival(f), true
}

// readAsyncResult reads one bench async-vs-sync --json output and checks that it holds whole pairs.
func readAsyncResult(path string) (*asyncBenchResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res asyncBenchResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: not a bench async-vs-sync --json output: %w", path, err)
	}
	if len(res.Pairs) == 0 {
		return nil, fmt.Errorf("%s: no pairs (not a bench async-vs-sync --json output)", path)
	}
	for i, p := range res.Pairs {
		if p == nil || p.Sync == nil || p.Async == nil {
			return nil, fmt.Errorf("%s: pair %d lacks a mode's trial", path, i+1)
		}
	}
	return &res, nil
}

// ranCalibrated says whether res's epochs were chosen by calibration: its own, or, for a pooled output,
// each of its runs'.
func ranCalibrated(res *asyncBenchResult) bool {
	return res.Workload.Calibration != nil || res.Workload.Calibrated
}

// sameAsyncWorkload reports the settings in which res's workload differs from first's (workloadDiff).
func sameAsyncWorkload(first, res *asyncBenchResult) error {
	if diff := workloadDiff(first, res); len(diff) > 0 {
		texts := make([]string, len(diff))
		for i, d := range diff {
			texts[i] = d.text
		}
		return fmt.Errorf("workload differs from the first run's: %s", strings.Join(texts, "; "))
	}
	return nil
}

// workloadSetting is one setting in which two workloads differ: its JSON name, and "name b, not a".
type workloadSetting struct{ name, text string }

// workloadDiff is the settings in which res's workload differs from first's, eta first. The seed never
// counts; the epochs do not when both runs calibrated their epochs, nor then the learning rate when
// --lr-epochs derived it from them.
func workloadDiff(first, res *asyncBenchResult) []workloadSetting {
	a, b := first.Workload, res.Workload
	calibrated := ranCalibrated(first) && ranCalibrated(res)
	a.Seed, b.Seed = 0, 0
	a.Calibration, b.Calibration = nil, nil
	a.PooledFrom, b.PooledFrom = nil, nil
	a.Calibrated, b.Calibrated = false, false
	if calibrated {
		a.Epochs, b.Epochs = 0, 0
		if a.LREpochs > 0 && b.LREpochs > 0 { // the learning rate follows the epochs; else it was given
			a.LearningRate, b.LearningRate = 0, 0
		}
	}
	var diff []workloadSetting
	if first.Eta != res.Eta {
		diff = append(diff, workloadSetting{"eta", fmt.Sprintf("eta %d, not %d", res.Eta, first.Eta)})
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
			diff = append(diff, workloadSetting{name, fmt.Sprintf("%s %v, not %v", name, vb.Field(i).Interface(), va.Field(i).Interface())})
		}
	}
	return diff
}
