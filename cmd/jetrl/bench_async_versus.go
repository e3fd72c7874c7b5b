package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/report"
)

// heldOutVersus compares two pools of bench async-vs-sync runs of one workload (--from and --versus),
// typically the binaries of two commits run alternately on the same seeds, or one setting of the method
// against another (versusSettings): the --versus pool's mean async -
// sync held-out difference minus the --from pool's, at the end of the window and along it. Over every
// pair the interval is Welch's (the pools' spreads may differ); over the seeds both pools hold exactly once
// it is the paired t interval of the per-seed deltas, which leaves out what the seed alone decides. Along
// the window each mode's own paired delta is given too: which mode moved.
type heldOutVersus struct {
	Versus []string `json:"versus"`
	Pairs  int      `json:"pairs"`
	// Settings names the settings of the method in which the --versus runs differ from --from's
	// (versusSettings; none when the pools compare two binaries).
	Settings []string `json:"settings,omitempty"`
	// End and Curve are over every pair of each pool (nil without two pairs in each; Curve nil too when a
	// pair of either pool has no curve).
	End   *versusDelta `json:"end,omitempty"`
	Curve *versusDelta `json:"curve,omitempty"`
	// Seeds is how many seeds both pools hold exactly once; the paired figures need two.
	Seeds       int          `json:"seeds"`
	PairedEnd   *versusDelta `json:"paired_end,omitempty"`
	PairedCurve *versusDelta `json:"paired_curve,omitempty"`
	// PairedCurveSync and PairedCurveAsync are each mode's held-out along the window, paired by seed.
	PairedCurveSync  *versusDelta `json:"paired_curve_sync,omitempty"`
	PairedCurveAsync *versusDelta `json:"paired_curve_async,omitempty"`
	// PairedSpeedup and PairedDroppedStale are the pairs' async/sync speedup and the asynchronous runs'
	// episodes dropped as too stale, paired by seed: how the pace and the staleness moved with the held-out.
	PairedSpeedup      *versusDelta `json:"paired_speedup,omitempty"`
	PairedDroppedStale *versusDelta `json:"paired_dropped_stale,omitempty"`
}

// versusDelta is a figure's mean in each pool, the --versus mean minus the --from one, and the delta's
// two-sided 95% interval.
type versusDelta struct {
	From   float64    `json:"from"`
	Versus float64    `json:"versus"`
	Delta  float64    `json:"delta"`
	CI95   [2]float64 `json:"ci95"`
}

// poolVersus pools the runs of versus and compares them with from's pooled result. Every run of each pool
// must be of one workload (as --from requires of its own), and the two pools of one workload but for the
// settings of the method a comparison is for (versusSettings): those are named in Settings.
func poolVersus(fromPaths, versusPaths []string, from *asyncBenchResult) (*heldOutVersus, error) {
	versus, err := poolAsyncResults(versusPaths)
	if err != nil {
		return nil, fmt.Errorf("--versus: %w", err)
	}
	settings, err := versusWorkloads(from, versus)
	if err != nil {
		return nil, fmt.Errorf("--versus: %w", err)
	}
	v := compareVersus(from, versus, versusPaths)
	v.Settings = settings
	return v, nil
}

// versusSettings are the settings of the method (their JSON names) two pools may differ in: the staleness
// bound, how batches are composed and what a late episode trains, the off-policy correction. The rest of
// the workload (the tasks, the window, the batch, the env, the trainer's epochs and rate, the evaluation) is
// the frame the comparison holds fixed.
var versusSettings = []string{"eta", "max_queued", "lead_ms", "cut", "turn_staleness", "stop_stale", "correction", "is_cap"}

// versusWorkloads checks that versus's workload is from's but for versusSettings, and names those it
// differs in ("turn_staleness true, not false").
func versusWorkloads(from, versus *asyncBenchResult) ([]string, error) {
	var settings, frame []string
	for _, d := range workloadDiff(from, versus) {
		if slices.Contains(versusSettings, d.name) {
			settings = append(settings, d.text)
		} else {
			frame = append(frame, d.text)
		}
	}
	if len(frame) > 0 {
		return nil, fmt.Errorf("workload differs from --from's: %s", strings.Join(frame, "; "))
	}
	return settings, nil
}

// compareVersus is heldOutVersus of the pairs of versus (pooled from the files named) against those of
// from; both are pooled, summarised results.
func compareVersus(from, versus *asyncBenchResult, names []string) *heldOutVersus {
	out := &heldOutVersus{Versus: names, Pairs: len(versus.Pairs)}
	end := func(p *asyncPair) (float64, bool) { return p.HeldOutAsync - p.HeldOutSync, true }
	curve := func(p *asyncPair) (float64, bool) {
		if p.HeldOutCurveAsync == nil || p.HeldOutCurveSync == nil {
			return 0, false
		}
		return *p.HeldOutCurveAsync - *p.HeldOutCurveSync, true
	}
	curveSync := func(p *asyncPair) (float64, bool) {
		if p.HeldOutCurveSync == nil {
			return 0, false
		}
		return *p.HeldOutCurveSync, true
	}
	curveAsync := func(p *asyncPair) (float64, bool) {
		if p.HeldOutCurveAsync == nil {
			return 0, false
		}
		return *p.HeldOutCurveAsync, true
	}
	out.End = welchDelta(values(from.Pairs, end), values(versus.Pairs, end))
	out.Curve = welchDelta(values(from.Pairs, curve), values(versus.Pairs, curve))

	// The seeds each pool holds exactly once, in the order of --from's pairs.
	once := func(pairs []*asyncPair) map[uint64]*asyncPair {
		n, m := map[uint64]int{}, map[uint64]*asyncPair{}
		for _, p := range pairs {
			n[p.Seed]++
			m[p.Seed] = p
		}
		for s, c := range n {
			if c > 1 {
				delete(m, s)
			}
		}
		return m
	}
	fs, vs := once(from.Pairs), once(versus.Pairs)
	var a, b []*asyncPair
	for _, p := range from.Pairs {
		if fs[p.Seed] == p && vs[p.Seed] != nil {
			a, b = append(a, p), append(b, vs[p.Seed])
		}
	}
	out.Seeds = len(a)
	out.PairedEnd = pairedDelta(a, b, end)
	out.PairedCurve = pairedDelta(a, b, curve)
	out.PairedCurveSync = pairedDelta(a, b, curveSync)
	out.PairedCurveAsync = pairedDelta(a, b, curveAsync)
	out.PairedSpeedup = pairedDelta(a, b, func(p *asyncPair) (float64, bool) { return p.Speedup, true })
	out.PairedDroppedStale = pairedDelta(a, b, func(p *asyncPair) (float64, bool) {
		if p.Async == nil {
			return 0, false
		}
		return float64(p.Async.DroppedStale), true
	})
	return out
}

// values is f of each pair, nil if any pair lacks it.
func values(pairs []*asyncPair, f func(*asyncPair) (float64, bool)) []float64 {
	out := make([]float64, 0, len(pairs))
	for _, p := range pairs {
		v, ok := f(p)
		if !ok {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// welchDelta is mean(b) - mean(a) with Welch's 95% interval; nil without two finite values in each.
func welchDelta(a, b []float64) *versusDelta {
	sa, errA := report.NewStat(a)
	sb, errB := report.NewStat(b)
	if errA != nil || errB != nil || sa.N < 2 || sb.N < 2 {
		return nil
	}
	d := &versusDelta{From: sa.Mean, Versus: sb.Mean, Delta: sb.Mean - sa.Mean}
	va, vb := sa.Std*sa.Std/float64(sa.N), sb.Std*sb.Std/float64(sb.N)
	se := math.Sqrt(va + vb)
	if se == 0 {
		d.CI95 = [2]float64{d.Delta, d.Delta}
		return d
	}
	// Welch–Satterthwaite degrees of freedom.
	df := (va + vb) * (va + vb) / (va*va/float64(sa.N-1) + vb*vb/float64(sb.N-1))
	if !(df > 0) { // both variances so small that their squares vanish
		df = float64(min(sa.N, sb.N) - 1)
	}
	half := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(0.975) * se
	d.CI95 = [2]float64{d.Delta - half, d.Delta + half}
	return d
}

// pairedDelta is the mean of f(b[i]) - f(a[i]) with its paired t 95% interval; nil with fewer than two
// seeds, when a pair of either side lacks f, or with a value not finite.
func pairedDelta(a, b []*asyncPair, f func(*asyncPair) (float64, bool)) *versusDelta {
	va, vb := values(a, f), values(b, f)
	if len(a) < 2 || va == nil || vb == nil {
		return nil
	}
	d, ma, mb := pairedDiffs(va, vb)
	mean, _, ci := pairedInterval(d)
	if math.IsNaN(mean) {
		return nil
	}
	return &versusDelta{From: ma, Versus: mb, Delta: mean, CI95: ci}
}

// printVersus shows the comparison of --versus's runs with --from's, in points.
func printVersus(v *heldOutVersus, fromPairs int) {
	if v == nil {
		return
	}
	show := func(name string, d *versusDelta) string {
		if d == nil {
			return name + " -"
		}
		return fmt.Sprintf("%s %+.1f against %+.1f, versus - from %+.1f [%+.1f, %+.1f]", name, 100*d.Versus, 100*d.From, 100*d.Delta, 100*d.CI95[0], 100*d.CI95[1])
	}
	level := func(name string, d *versusDelta) string { // a mode's own held-out, a success rate
		return fmt.Sprintf("%s %.1f%% against %.1f%%, %+.1f [%+.1f, %+.1f]", name, 100*d.Versus, 100*d.From, 100*d.Delta, 100*d.CI95[0], 100*d.CI95[1])
	}
	settings := ""
	if len(v.Settings) > 0 {
		settings = " with " + strings.Join(v.Settings, ", ")
	}
	fmt.Printf("versus %d pairs from %d runs (%s)%s against --from's %d pairs, async - sync held-out (points), every pair (Welch): %s; %s\n",
		v.Pairs, len(v.Versus), baseNames(v.Versus), settings, fromPairs, show("end", v.End), show("along the window", v.Curve))
	if v.Seeds < 2 {
		fmt.Printf("versus: %d seeds in both pools once each, too few to pair\n", v.Seeds)
		return
	}
	parts := []string{show("end", v.PairedEnd), show("along the window", v.PairedCurve)}
	if v.PairedCurveSync != nil && v.PairedCurveAsync != nil {
		parts = append(parts, level("sync alone along the window", v.PairedCurveSync), level("async alone along the window", v.PairedCurveAsync))
	}
	if d := v.PairedSpeedup; d != nil {
		parts = append(parts, fmt.Sprintf("speedup %.2fx against %.2fx, %+.2f [%+.2f, %+.2f]", d.Versus, d.From, d.Delta, d.CI95[0], d.CI95[1]))
	}
	if d := v.PairedDroppedStale; d != nil {
		parts = append(parts, fmt.Sprintf("async stale drops %.0f against %.0f, %+.0f [%+.0f, %+.0f]", d.Versus, d.From, d.Delta, d.CI95[0], d.CI95[1]))
	}
	fmt.Printf("versus, paired by the %d seeds both pools hold once: %s\n", v.Seeds, strings.Join(parts, "; "))
}

// baseNames shows files by their names alone, "a.json, b.json".
func baseNames(paths []string) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return strings.Join(names, ", ")
}
