package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/jetrl/jetrl/shared/policy"
)

// benchJSON runs a benchmark's result through JSON, as --json prints it.
func benchJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func benchWantPositive(t *testing.T, obj map[string]any, key string) float64 {
	t.Helper()
	v, ok := obj[key].(float64)
	if !ok || !(v > 0) {
		t.Errorf("%s = %v, want a positive number", key, obj[key])
	}
	return v
}

// A tiny async-vs-sync run: the calibration chooses the epochs, both modes train, the JSON has the keys the
// README documents, rates are positive and nothing trained beyond the staleness bound. No timing is asserted.
func TestBenchAsyncVsSyncSmoke(t *testing.T) {
	c := &benchAsyncCmd{
		Tasks: []string{"db"}, Episodes: 16, Warmup: 1, GroupSize: 4, BatchSize: 8, Concurrency: 16, Eta: 2, Epochs: 0, CalEpochs: 1, CalBusy: 0.9, Recalibrate: true, LR: 0.0035,
		LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, EnvHosts: 1, EvalEpisodes: 4, Seed: 1, Seeds: 2,
		MaxQueued: 1, Lead: 100 * time.Millisecond, Cut: 0.75, TurnStale: true, HeldOutPoints: 2, Timeout: 2 * time.Minute, JSON: true, LogLevel: "error", policyBits: 12,
	}
	var progress bytes.Buffer
	c.progress = &progress
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// With --json the progress still comes, each pair's figures as it ends.
	for _, p := range res.Pairs {
		// Every trained episode has at least one turn; the pace is the window's update time over its turns
		// and the pair's epochs.
		for _, tr := range []*trialResult{p.Sync, p.Async} {
			wantPace := 1e6 * tr.TrainerUpdate * tr.Seconds / float64(tr.TrainedTurns*int64(p.Epochs))
			if tr.TrainedTurns < tr.Episodes || !(tr.UpdatePace > 0) || math.Abs(tr.UpdatePace-wantPace) > 1e-6*wantPace {
				t.Errorf("seed %d: %d trained turns for %d episodes, update pace %v µs (want %v): want at least a turn per episode and the window's update time per turn and epoch",
					p.Seed, tr.TrainedTurns, tr.Episodes, tr.UpdatePace, wantPace)
			}
		}
		if p.PaceRatio != p.Async.UpdatePace/p.Sync.UpdatePace {
			t.Errorf("seed %d: pace ratio %v, want async's %v over sync's %v", p.Seed, p.PaceRatio, p.Async.UpdatePace, p.Sync.UpdatePace)
		}
		if want := fmt.Sprintf("trainer update per turn and epoch async/sync %.2f", p.PaceRatio); !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
		want := fmt.Sprintf("seed %d: %d epochs, async %.1f vs sync %.1f trained episodes/s (%.2fx), trainer busy async %.1f%%",
			p.Seed, p.Epochs, p.Async.EpisodesPerS, p.Sync.EpisodesPerS, p.Speedup, 100*p.Async.TrainerBusy)
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if want := fmt.Sprintf("calibration: asynchronous, seed %d, 1 epochs...", c.Seed); !strings.Contains(progress.String(), want) {
		t.Errorf("progress lacks the calibration's first run %q:\n%s", want, progress.String())
	}
	if want := fmt.Sprintf("calibration: asynchronous, seed %d, %d epochs...", res.Pairs[1].Seed, res.Pairs[0].Epochs); !strings.Contains(progress.String(), want) {
		t.Errorf("progress lacks the second pair's check %q:\n%s", want, progress.String())
	}
	out := benchJSON(t, res)
	benchWantPositive(t, out, "sync_episodes_per_s")
	benchWantPositive(t, out, "async_episodes_per_s")
	benchWantPositive(t, out, "speedup")
	benchWantPositive(t, out, "trainer_busy_async")
	benchWantPositive(t, out, "trainer_busy_sync")
	for _, k := range []string{"max_staleness", "staleness_histogram", "heldout_success_sync", "heldout_success_async", "sync", "async", "workload",
		"heldout_success_sync_std", "heldout_success_async_std", "heldout_diff_mean", "heldout_diff_std", "heldout_diff_ci95",
		"heldout_by_task_sync", "heldout_by_task_async", "heldout_curve_diff_ci95"} {
		if _, ok := out[k]; !ok {
			t.Errorf("JSON has no %q", k)
		}
	}
	if ci := res.HeldOutDiffCI95; ci == nil || !(ci[0] <= res.HeldOutDiffMean && res.HeldOutDiffMean <= ci[1]) {
		t.Errorf("held-out difference %v with interval %v, want the mean inside it", res.HeldOutDiffMean, ci)
	}
	cal := res.Workload.Calibration
	if cal == nil || len(cal.Runs) == 0 || len(cal.Runs) > calibrateRuns {
		t.Fatalf("--epochs 0: calibration %+v, want 1 to %d runs", cal, calibrateRuns)
	}
	for i, r := range cal.Runs {
		last := i == len(cal.Runs)-1
		if r.Seed != c.Seed || r.Batches < c.Episodes/int64(c.BatchSize) || !(r.SecondsPerBatch > 0) || !(r.TrainerBusy > 0) || !(r.UpdatePace > 0) || (i == 0 && r.Epochs != c.CalEpochs) ||
			(i > 0 && r.Epochs <= cal.Runs[i-1].Epochs) || (!last && r.TrainerBusy >= cal.TargetBusy) || (!last && plateaued(cal.Runs[:i+1])) {
			t.Errorf("calibration run %d of %+v: want --seed's runs, the window's batches measured with an update pace, rising epochs from %d, and runs below the target and rising until the last", i, cal.Runs, c.CalEpochs)
		}
	}
	lr := cal.Runs[len(cal.Runs)-1]
	want := lr.Epochs
	if lr.TrainerBusy < cal.TargetBusy {
		want = chooseEpochs(cal.Runs)
	}
	if cal.ChosenEpochs != want || cal.Reached != (lr.TrainerBusy >= cal.TargetBusy) || cal.Plateau != (!cal.Reached && plateaued(cal.Runs)) {
		t.Errorf("calibration chose %d epochs (reached %v, plateau %v) after %+v: want %d", cal.ChosenEpochs, cal.Reached, cal.Plateau, cal.Runs, want)
	}
	if c.Epochs != 0 || res.Pairs[0].Epochs != cal.ChosenEpochs || len(res.Pairs[0].Recalibration) != 0 {
		t.Errorf("flags' epochs %d, first pair's %d after %d checks: want the flag left at 0 and the first pair at the chosen %d, unchecked",
			c.Epochs, res.Pairs[0].Epochs, len(res.Pairs[0].Recalibration), cal.ChosenEpochs)
	}
	// --recalibrate (the default): the second pair's epochs were checked in one or two runs, starting at the
	// first pair's: raised when the trainer was under recalibrateBelow busy, lowered (lowerEpochs) when it
	// was busy but slower per turn than in the calibration's chosen run.
	if cal.RecalibrateBelow != recalibrateBelow || cal.RecalibrateSlower != recalibrateSlower {
		t.Errorf("recalibrate_below %v and recalibrate_slower %v, want %v and %v", cal.RecalibrateBelow, cal.RecalibrateSlower, recalibrateBelow, recalibrateSlower)
	}
	rc := res.Pairs[1].Recalibration
	if len(rc) == 0 || len(rc) > recalibrateRuns || rc[0].Epochs != res.Pairs[0].Epochs {
		t.Fatalf("second pair's recalibration %+v: want 1 to %d runs, the first at the first pair's %d epochs", rc, recalibrateRuns, res.Pairs[0].Epochs)
	}
	for _, r := range rc {
		if r.Seed != res.Pairs[1].Seed {
			t.Errorf("second pair's check %+v: want it on the pair's seed %d", r, res.Pairs[1].Seed)
		}
	}
	wantEpochs := rc[0].Epochs
	switch lower := lowerEpochs(rc[0].Epochs, rc[0].UpdatePace, cal.chosenRun()); {
	case rc[0].TrainerBusy < cal.RecalibrateBelow:
		if len(rc) == 2 && rc[1].Epochs != nextEpochs(rc[0].Epochs, rc[0].TrainerBusy, cal.TargetBusy) {
			t.Errorf("recalibration %+v: want the second run at the epochs nextEpochs gives", rc)
		}
		wantEpochs = chooseEpochs(rc)
		if wantEpochs < res.Pairs[0].Epochs {
			t.Errorf("recalibration %+v chose %d epochs: a trainer waiting for data never gets fewer than the first pair's %d", rc, wantEpochs, res.Pairs[0].Epochs)
		}
	case lower < rc[0].Epochs:
		if len(rc) != 2 || rc[1].Epochs != lower {
			t.Fatalf("recalibration %+v: a busy check slower than the calibration wants a second run at %d epochs", rc, lower)
		}
		if wantEpochs = lower; rc[1].TrainerBusy < cal.RecalibrateBelow {
			wantEpochs = chooseEpochs(rc)
		}
	case len(rc) != 1:
		t.Errorf("recalibration %+v: want no second run after one at least %v busy at the calibration's pace", rc, cal.RecalibrateBelow)
	}
	if res.Pairs[1].Epochs != wantEpochs {
		t.Errorf("second pair at %d epochs after the checks %+v: want %d", res.Pairs[1].Epochs, rc, wantEpochs)
	}
	if wantWorkload := map[bool]int{true: cal.ChosenEpochs, false: 0}[wantEpochs == cal.ChosenEpochs]; res.Workload.Epochs != wantWorkload {
		t.Errorf("workload epochs %d with pairs at %d and %d: want %d (0 when the pairs differ)", res.Workload.Epochs, res.Pairs[0].Epochs, res.Pairs[1].Epochs, wantWorkload)
	}
	if res.Workload.LeadMS != 100 || res.Workload.Cut != 0.75 {
		t.Errorf("workload lead %v ms and cut %v, want the --lead of 100 ms and the --cut of 0.75", res.Workload.LeadMS, res.Workload.Cut)
	}
	if as, _ := out["async"].(map[string]any); as == nil || as["cut_playing"] == nil || as["stale_in_baseline"] == nil || as["stale_turns"] == nil {
		t.Errorf("JSON async %v has no cut_playing, stale_in_baseline or stale_turns", out["async"])
	}
	if wl, _ := out["workload"].(map[string]any); wl["turn_staleness"] != true {
		t.Errorf("JSON workload %v: want turn_staleness true (--turn-staleness)", wl)
	}
	if res.Workload.LearningRate != c.LR {
		t.Errorf("learning rate %v at %d epochs, want --lr %v whatever the epochs", res.Workload.LearningRate, cal.ChosenEpochs, c.LR)
	}
	wl, _ := out["workload"].(map[string]any)
	if jc, ok := wl["calibration"].(map[string]any); !ok || jc["chosen_epochs"] == nil {
		t.Errorf("JSON workload %v has no calibration with chosen_epochs", wl)
	}
	pairs, ok := out["pairs"].([]any)
	if !ok || len(pairs) != c.Seeds {
		t.Fatalf("pairs = %v, want one per seed (%d)", out["pairs"], c.Seeds)
	}
	if p1, _ := pairs[1].(map[string]any); p1 == nil || p1["recalibration"] == nil {
		t.Errorf("JSON's second pair %v has no recalibration", pairs[1])
	}
	var meanSpeedup float64
	for i, p := range res.Pairs {
		if p.Seed != c.Seed+uint64(i) || p.Sync == nil || p.Async == nil || !(p.Speedup > 0) {
			t.Errorf("pair %d: %+v, want seed %d with both modes and a positive speedup", i, p, c.Seed+uint64(i))
		}
		meanSpeedup += p.Speedup / float64(len(res.Pairs))
	}
	if math.Abs(res.Speedup-meanSpeedup) > 1e-9 {
		t.Errorf("speedup %v, want the mean of the pairs' %v", res.Speedup, meanSpeedup)
	}
	if ms, ok := out["max_staleness"].(float64); !ok || ms < 0 || ms > float64(c.Eta) {
		t.Errorf("max_staleness %v, want within [0, eta=%d]", out["max_staleness"], c.Eta)
	}
	if res.Sync.MaxStaleness != 0 || len(res.Sync.Staleness) != 1 {
		t.Errorf("synchronous mode trained stale data: histogram %v", res.Sync.Staleness)
	}
	if len(res.Async.Staleness) > c.Eta+1 {
		t.Errorf("asynchronous staleness histogram %v goes past eta %d", res.Async.Staleness, c.Eta)
	}
	for _, r := range []*trialResult{res.Sync, res.Async, res.Pairs[1].Sync, res.Pairs[1].Async} {
		if r.Episodes < c.Episodes || r.EpisodesTrained < c.Episodes+c.Warmup*int64(c.BatchSize) || len(r.HeldOut) != 1 {
			t.Errorf("trial %+v: want at least %d episodes measured and a held-out score for db", r, c.Episodes)
		}
		if sh, ok := r.TrainedSuccessByTask["db"]; !ok || len(r.TrainedSuccessByTask) != 1 || sh < 0 || sh > 1 {
			t.Errorf("trained success by task %v, want db's share in [0, 1]", r.TrainedSuccessByTask)
		}
		if n := r.TrainedTurnsByTask["db"]; !(n >= 1) || r.TrainedByTask["db"] < r.Episodes {
			t.Errorf("trained %v episodes of %v mean turns, want db's at least the %d measured, of at least one turn each", r.TrainedByTask, r.TrainedTurnsByTask, r.Episodes)
		}
		if sh, ok := r.TrainedMixedByTask["db"]; !ok || len(r.TrainedMixedByTask) != 1 || sh < 0 || sh > 1 {
			t.Errorf("trained mixed groups by task %v, want db's share in [0, 1]", r.TrainedMixedByTask)
		}
		for task, sh := range r.StaleMixedByTask {
			if task != "db" || sh < 0 || sh > 1 || r.DroppedStaleByTask[task] == 0 {
				t.Errorf("stale mixed groups by task %v (stale drops %v), want db's share in [0, 1] of its drops", r.StaleMixedByTask, r.DroppedStaleByTask)
			}
		}
		for task, sh := range r.StaleSuccessByTask {
			if task != "db" || sh < 0 || sh > 1 || r.DroppedStaleByTask[task] == 0 {
				t.Errorf("stale success by task %v (stale drops %v), want db's share in [0, 1] of its drops", r.StaleSuccessByTask, r.DroppedStaleByTask)
			}
		}
		benchCheckCurve(t, r, c)
	}
	for i, p := range res.Pairs {
		if p.HeldOutCurveSync == nil || p.HeldOutCurveAsync == nil ||
			math.Abs(*p.HeldOutCurveSync-curveMean(p.Sync)) > 1e-12 || math.Abs(*p.HeldOutCurveAsync-curveMean(p.Async)) > 1e-12 {
			t.Fatalf("pair %d: curve means %v and %v, want the means of the points after the start", i, p.HeldOutCurveSync, p.HeldOutCurveAsync)
		}
	}
	if ci, m := res.HeldOutCurveDiffCI95, res.HeldOutCurveDiffMean; ci == nil || m == nil || !(ci[0] <= *m && *m <= ci[1]) {
		t.Errorf("held-out curve difference %v with interval %v, want the mean inside it", m, ci)
	}
	for _, k := range []string{"heldout_curve_sync", "heldout_curve_async", "heldout_curve_diff_mean"} {
		if _, ok := out[k].(float64); !ok {
			t.Errorf("JSON %q = %v, want a number (even when it is 0)", k, out[k])
		}
	}
	var syncDB float64
	for _, p := range res.Pairs {
		syncDB += p.Sync.HeldOut["db"].Success / float64(len(res.Pairs))
	}
	if math.Abs(res.HeldOutByTaskSync["db"]-syncDB) > 1e-12 || len(res.HeldOutByTaskAsync) != 1 {
		t.Errorf("held-out by task %v / %v, want db's mean over pairs %v in each mode", res.HeldOutByTaskSync, res.HeldOutByTaskAsync, syncDB)
	}
	benchCheckPooling(t, res)
}

// benchCheckPooling splits a two-pair run's --json output into two one-pair files and checks that --from
// pools them back into the run's own summary, and refuses runs of another workload.
func benchCheckPooling(t *testing.T, res *asyncBenchResult) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, r *asyncBenchResult) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// Each file is what a one-pair run prints: its own summary, its own seed.
	one := func(i int, edit func(*asyncBenchResult)) *asyncBenchResult {
		var r asyncBenchResult
		b, _ := json.Marshal(res)
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		r.Pairs = r.Pairs[i : i+1]
		r.Workload.Seed, r.Workload.Epochs = r.Pairs[0].Seed, r.Pairs[0].Epochs // a one-pair run's are its pair's
		if err := r.summarize(); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	a, b := write("a.json", one(0, nil)), write("b.json", one(1, nil))
	pooled, err := poolAsyncResults([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	if len(pooled.Pairs) != 2 || !near(pooled.Speedup, res.Speedup) || !near(pooled.TrainerBusyAsync, res.TrainerBusyAsync) ||
		!near(pooled.HeldOutDiffMean, res.HeldOutDiffMean) || !near(pooled.HeldOutDiffStd, res.HeldOutDiffStd) ||
		pooled.HeldOutDiffCI95 == nil || !near(pooled.HeldOutDiffCI95[0], res.HeldOutDiffCI95[0]) || !near(pooled.HeldOutDiffCI95[1], res.HeldOutDiffCI95[1]) ||
		pooled.MaxStaleness != res.MaxStaleness || !reflect.DeepEqual(pooled.StalenessHist, res.StalenessHist) ||
		!near(pooled.HeldOutByTaskAsync["db"], res.HeldOutByTaskAsync["db"]) || pooled.HeldOutCurveDiffCI95 == nil ||
		!near(pooled.HeldOutCurveDiffCI95[0], res.HeldOutCurveDiffCI95[0]) {
		t.Errorf("pooled %+v\nwant the two-pair run's summary %+v", pooled, res)
	}
	if !reflect.DeepEqual(pooled.Workload.PooledFrom, []string{a, b}) || pooled.Workload.Calibration != nil || pooled.Workload.Epochs != res.Workload.Epochs ||
		pooled.Pairs[0].Epochs != res.Pairs[0].Epochs || pooled.Pairs[1].Epochs != res.Pairs[1].Epochs {
		t.Errorf("pooled workload %+v, pair epochs %d and %d: want both files named, no calibration, the run's %d epochs (0 when its pairs differ) and each pair's own",
			pooled.Workload, pooled.Pairs[0].Epochs, pooled.Pairs[1].Epochs, res.Workload.Epochs)
	}
	// A seed run twice is two pairs; the summary is over all three.
	if p3, err := poolAsyncResults([]string{a, b, b}); err != nil || len(p3.Pairs) != 3 || p3.HeldOutDiffCI95 == nil || p3.HeldOutRuns != nil {
		t.Errorf("pooling a file twice: %v, %+v; want three pairs, and no comparison of runs of one pair each", err, p3)
	}
	// Two runs of the same two pairs (the second pair's async held-out moved, so that they differ within the
	// run): their means are the run's, and they differ not at all (F 0, p 1).
	var two asyncBenchResult
	if b, err := json.Marshal(res); err != nil || json.Unmarshal(b, &two) != nil {
		t.Fatal("copying the run's result", err)
	}
	two.Pairs[1].Async.HeldOutSuccess += 0.1
	if err := two.summarize(); err != nil {
		t.Fatal(err)
	}
	both := write("both.json", &two)
	pooledTwo, err := poolAsyncResults([]string{both, both})
	if err != nil {
		t.Fatal(err)
	}
	if r := pooledTwo.HeldOutRuns; r == nil || len(r.Runs) != 2 || r.Runs[1].From != both || r.Runs[1].Pairs != 2 || !near(r.Runs[1].Mean, two.HeldOutDiffMean) ||
		r.DF1 != 1 || r.DF2 != 2 || !near(r.F, 0) || !near(r.P, 1) {
		t.Errorf("runs compared %+v; want two of 2 pairs at mean %v, F(1, 2) = 0, p = 1", r, two.HeldOutDiffMean)
	}
	// Calibrated runs may differ in epochs; the pooled workload then has none, each pair its own.
	c18 := write("c18.json", one(1, func(r *asyncBenchResult) {
		r.Workload.Epochs, r.Pairs[0].Epochs = r.Workload.Epochs+2, r.Workload.Epochs+2
	}))
	if p, err := poolAsyncResults([]string{a, c18}); err != nil || p.Workload.Epochs != 0 || p.Pairs[1].Epochs != res.Pairs[1].Epochs+2 {
		t.Errorf("pooling calibrated runs of other epochs: %v, workload epochs %v; want them pooled, the pair keeping its epochs", err, p)
	} else if !p.Workload.Calibrated {
		t.Error("pooled calibrated runs: the pooled workload does not say they calibrated")
	} else {
		// The pooled output pools again with a calibrated run of yet other epochs, not with a given-epochs one.
		again := write("pooled.json", p)
		c20 := write("c20.json", one(0, func(r *asyncBenchResult) {
			r.Workload.Epochs, r.Pairs[0].Epochs = r.Workload.Epochs+4, r.Workload.Epochs+4
		}))
		if p2, err := poolAsyncResults([]string{again, c20}); err != nil || len(p2.Pairs) != 3 || !p2.Workload.Calibrated ||
			!reflect.DeepEqual(p2.Workload.PooledFrom, []string{a, c18, c20}) {
			t.Errorf("pooling a pooled output of calibrated runs with another calibrated run: %v, %+v; want three pairs, calibrated, from the three files", err, p2)
		}
		// A file the pooled output holds, given again, would count its pairs twice.
		if _, err := poolAsyncResults([]string{again, a}); err == nil || !strings.Contains(err.Error(), "count twice") {
			t.Errorf("pooling a pooled output with a file it holds: err = %v, want it refused", err)
		}
		// A given-epochs run pools only with runs of its epochs, whatever the order of the files.
		g := write("g.json", one(0, func(r *asyncBenchResult) { r.Workload.Calibration = nil }))
		if _, err := poolAsyncResults([]string{a, g, c18}); err == nil || !strings.Contains(err.Error(), "given epochs") {
			t.Errorf("pooling a calibrated run, a given-epochs run of its epochs and a calibrated run of others: err = %v, want it refused", err)
		}
		if p4, err := poolAsyncResults([]string{a, g}); err != nil || p4.Workload.Calibrated {
			t.Errorf("pooling a calibrated run with a given-epochs run of its epochs: %v, %+v; want them pooled, not calibrated", err, p4)
		}
		given := write("given.json", one(0, func(r *asyncBenchResult) { r.Workload.Calibration, r.Workload.Epochs = nil, r.Workload.Epochs+4 }))
		if _, err := poolAsyncResults([]string{again, given}); err == nil || !strings.Contains(err.Error(), "epochs") {
			t.Errorf("pooling a pooled output of calibrated runs with a given-epochs run of other epochs: err = %v, want it refused", err)
		}
		if p3, err := poolAsyncResults([]string{a, given}); err == nil {
			t.Errorf("pooling a calibrated run with a given-epochs run of other epochs: %+v, want it refused", p3)
		}
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*asyncBenchResult)
	}{
		{"eta", "eta 3, not", func(r *asyncBenchResult) { r.Eta = 3 }},
		{"lead", "lead_ms 250, not", func(r *asyncBenchResult) { r.Workload.LeadMS = 250 }},
		{"given-epochs", "epochs", func(r *asyncBenchResult) { r.Workload.Calibration, r.Workload.Epochs = nil, r.Workload.Epochs+2 }},
	} {
		other := write(tc.name+".json", one(1, tc.edit))
		if _, err := poolAsyncResults([]string{a, other}); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), other) {
			t.Errorf("pooling a run with another %s: err = %v, want one naming %s and %q", tc.name, err, other, tc.want)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"speedup": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := poolAsyncResults([]string{a, bad}); err == nil || !strings.Contains(err.Error(), "no pairs") {
		t.Errorf("pooling a file without pairs: err = %v, want one saying so", err)
	}
	// --versus: the run against itself moves nothing, paired by both seeds; one pair against another of
	// another seed pairs none and has no spread to compare by.
	v, err := poolVersus([]string{a, b}, []string{b, a}, pooled)
	if err != nil || v.Seeds != 2 || v.Pairs != 2 || v.PairedEnd == nil || v.PairedEnd.Delta != 0 || v.PairedEnd.CI95 != [2]float64{0, 0} ||
		v.End == nil || !near(v.End.Delta, 0) || v.PairedCurveAsync == nil || v.PairedCurveAsync.Delta != 0 {
		t.Errorf("the run versus itself: %v, %+v; want both seeds paired, every delta 0", err, v)
	}
	if v, err := poolVersus([]string{a}, []string{b}, one(0, nil)); err != nil || v.Seeds != 0 || v.End != nil || v.PairedEnd != nil {
		t.Errorf("one pair versus another seed's: %v, %+v; want nothing paired or compared", err, v)
	}
	// A setting of the method may differ, and is named; the frame may not.
	lead := write("lead.json", one(1, func(r *asyncBenchResult) { r.Workload.LeadMS, r.Workload.Cut = 250, 0.5 }))
	if v, err := poolVersus([]string{a}, []string{lead}, one(0, nil)); err != nil || len(v.Settings) != 2 ||
		v.Settings[0] != "lead_ms 250, not 100" || v.Settings[1] != "cut 0.5, not 0.75" {
		t.Errorf("versus a run of another lead and cut: %v, %+v; want both settings named", err, v)
	}
	if v, err := poolVersus([]string{a}, []string{b}, one(0, nil)); err != nil || len(v.Settings) != 0 {
		t.Errorf("versus a run of the same settings: %v, %+v; want none named", err, v)
	}
	batch := write("batch.json", one(1, func(r *asyncBenchResult) { r.Workload.BatchSize *= 2; r.Workload.LeadMS = 250 }))
	if _, err := poolVersus([]string{a}, []string{batch}, one(0, nil)); err == nil || !strings.Contains(err.Error(), "batch_size") || strings.Contains(err.Error(), "lead_ms") {
		t.Errorf("versus a run of another batch size: err = %v, want it refused for the batch size alone", err)
	}
	mixed := write("mixed.json", one(0, func(r *asyncBenchResult) { r.Workload.LeadMS = 250 }))
	if _, err := poolVersus([]string{a}, []string{lead, mixed}, one(0, nil)); err == nil || !strings.Contains(err.Error(), "cut") {
		t.Errorf("a --versus pool of two settings: err = %v, want it refused", err)
	}
}

// benchCheckCurve checks a trial's held-out curve: the window's start, then one point per part, in order,
// the last being the end-of-window evaluation.
func benchCheckCurve(t *testing.T, r *trialResult, c *benchAsyncCmd) {
	t.Helper()
	cv := r.HeldOutCurve
	if len(cv) != c.HeldOutPoints+1 {
		t.Fatalf("held-out curve %+v: want %d points (the start and one per part)", cv, c.HeldOutPoints+1)
	}
	for i, p := range cv {
		if _, ok := p.ByTask["db"]; !ok || p.Success < 0 || p.Success > 1 {
			t.Errorf("curve point %d %+v: want db's success in [0, 1]", i, p)
		}
		if i > 0 && (p.EpisodesTrained <= cv[i-1].EpisodesTrained || p.Version <= cv[i-1].Version) {
			t.Errorf("curve %+v: want rising trained episodes and versions", cv)
		}
	}
	if cv[0].EpisodesTrained < c.Warmup*int64(c.BatchSize) || cv[0].EpisodesTrained >= c.Warmup*int64(c.BatchSize)+c.Episodes {
		t.Errorf("curve starts at %d trained episodes, want the window's start", cv[0].EpisodesTrained)
	}
	if last := cv[len(cv)-1]; last.Version != r.EvalVersion || last.EpisodesTrained != r.EpisodesTrained || last.Success != r.HeldOutSuccess {
		t.Errorf("curve ends at %+v, want the end-of-window evaluation (version %d, %d trained, %v)", last, r.EvalVersion, r.EpisodesTrained, r.HeldOutSuccess)
	}
}

// A tiny scale run over 1 and 2 replicas: episodes_per_s is keyed by replica count, rates are positive.
func TestBenchScaleSmoke(t *testing.T) {
	c := &benchScaleCmd{
		Replicas: []int{1, 2}, Concurrency: 4, Tasks: []string{"db"}, Episodes: 16, Warmup: 1, GroupSize: 4, BatchSize: 8,
		Eta: 2, Epochs: 1, LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, EnvHosts: 2, Seed: 1,
		Timeout: 2 * time.Minute, JSON: true, LogLevel: "error", policyBits: 12,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := benchJSON(t, res)
	for _, k := range []string{"episodes_per_s", "env_steps_per_s", "speedup", "trainer_busy"} {
		m, ok := out[k].(map[string]any)
		if !ok {
			t.Fatalf("%s = %v, want an object keyed by replica count", k, out[k])
		}
		for _, n := range []string{"1", "2"} {
			benchWantPositive(t, m, n)
		}
	}
	if ms, ok := out["max_staleness"].(float64); !ok || ms < 0 || ms > float64(c.Eta) {
		t.Errorf("max_staleness %v, want within [0, eta=%d]", out["max_staleness"], c.Eta)
	}
}

func TestBenchFlagsValidate(t *testing.T) {
	bad := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 0, GroupSize: 8, BatchSize: 12, Concurrency: 4, Eta: 0, Epochs: 1, EnvHosts: 1,
		LatencyMedian: 20 * time.Millisecond, LatencyP99: time.Millisecond}
	if err := bad.Validate(); err == nil {
		t.Fatal("bad async-vs-sync flags accepted")
	}
	lowCap := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, EnvHosts: 1,
		LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, Correction: "truncated", ISCap: 0.5}
	if err := lowCap.Validate(); err == nil || !strings.Contains(err.Error(), "--is-cap") {
		t.Fatalf("--is-cap 0.5: err = %v, want one that names --is-cap", err)
	}
	for _, busy := range []float64{math.NaN(), 0, 1} {
		badBusy := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 0, CalEpochs: 1, CalBusy: busy, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1}
		if err := badBusy.Validate(); err == nil || !strings.Contains(err.Error(), "--calibration-busy") {
			t.Fatalf("--calibration-busy %v: err = %v, want one that names --calibration-busy", busy, err)
		}
	}
	for _, tc := range []struct {
		epochs, lrEpochs int
		lr, want         float64
	}{{9, 6, 0.002, policy.DefaultLR * 6 / 9}, {3, 6, 0.002, policy.DefaultLR * 2}, {9, 0, 0.002, 0.002}, {20, 0, 0.0035, 0.0035}, {6, 6, 0, policy.DefaultLR}} {
		lc := &benchAsyncCmd{Epochs: tc.epochs, LREpochs: tc.lrEpochs, LR: tc.lr}
		if got := lc.learningRate(); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("learning rate at %d epochs, --lr %v, --lr-epochs %d: %v, want %v", tc.epochs, tc.lr, tc.lrEpochs, got, tc.want)
		}
	}
	for _, lr := range []float64{math.NaN(), 0, -0.001, 1} {
		badLR := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, LR: lr, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, HeldOutPoints: 1}
		if err := badLR.Validate(); err == nil || !strings.Contains(err.Error(), "--lr ") {
			t.Fatalf("--lr %v: err = %v, want one that names --lr", lr, err)
		}
		badLR.LR = 0.0035
		if err := badLR.Validate(); err != nil {
			t.Fatalf("--lr 0.0035: %v", err)
		}
	}
	for _, tc := range []struct {
		lead      time.Duration
		maxQueued int
		ok        bool
	}{{0, -1, true}, {100 * time.Millisecond, 1, true}, {-time.Millisecond, 1, false}, {2 * time.Minute, 1, false}, {100 * time.Millisecond, -1, false}} {
		bl := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, LR: 0.0035, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, HeldOutPoints: 1, Lead: tc.lead, MaxQueued: tc.maxQueued}
		if err := bl.Validate(); (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--lead")) {
			t.Fatalf("--lead %v --max-queued %d: err = %v, want ok %v (an error naming --lead)", tc.lead, tc.maxQueued, err, tc.ok)
		}
	}
	for _, cut := range []float64{-0.5, 1.5} {
		bc := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, LR: 0.0035, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, HeldOutPoints: 1, Cut: cut, MaxQueued: 1}
		if err := bc.Validate(); err == nil || !strings.Contains(err.Error(), "--cut") {
			t.Fatalf("--cut %v: err = %v, want one that names --cut", cut, err)
		}
	}
	negLR := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, LREpochs: -1, EnvHosts: 1,
		LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1}
	if err := negLR.Validate(); err == nil || !strings.Contains(err.Error(), "--lr-epochs") {
		t.Fatalf("--lr-epochs -1: err = %v, want one that names --lr-epochs", err)
	}
	for _, tc := range []struct {
		warmup, episodes, batches int64
		want, wantEpisodes        int64
	}{{2, 23040, 10, 42, 2560}, {2, 7680, 10, 12, 2560}, {1, 16, 1, 2, 8}, {1, 24, 3, 1, 24}, {2, 23040, 0, 2, 23040}, {1, 16, 0, 1, 16}} {
		cw := &benchAsyncCmd{Warmup: tc.warmup, Episodes: tc.episodes, BatchSize: 256, CalBatches: tc.batches}
		if tc.episodes < 256 {
			cw.BatchSize = 8
		}
		if got := cw.calibrationWarmup(); got != tc.want {
			t.Errorf("calibration warm-up for --warmup %d --episodes %d --calibration-batches %d: %d batches, want %d (the window's warm-up, or the measured batches centred on the window's middle)", tc.warmup, tc.episodes, tc.batches, got, tc.want)
		}
		if got := cw.calibrationEpisodes(); got != tc.wantEpisodes {
			t.Errorf("calibration episodes for --episodes %d --calibration-batches %d: %d, want %d", tc.episodes, tc.batches, got, tc.wantEpisodes)
		}
	}
	for _, batches := range []int64{-1, 3} {
		bb := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 16, GroupSize: 4, BatchSize: 8, Eta: 2, CalEpochs: 1, CalBusy: 0.9, LR: 0.0035, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, HeldOutPoints: 1, MaxQueued: 1, CalBatches: batches}
		if err := bb.Validate(); err == nil || !strings.Contains(err.Error(), "--calibration-batches") {
			t.Fatalf("--calibration-batches %d over a 2-batch window: err = %v, want one that names --calibration-batches", batches, err)
		}
	}
	for _, points := range []int{0, 9} {
		bp := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, EnvHosts: 1,
			LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 1, HeldOutPoints: points}
		if err := bp.Validate(); err == nil || !strings.Contains(err.Error(), "--heldout-points") {
			t.Fatalf("--heldout-points %d with 8 episodes: err = %v, want one that names --heldout-points", points, err)
		}
	}
	noSeeds := &benchAsyncCmd{Tasks: []string{"db"}, Episodes: 8, GroupSize: 4, BatchSize: 8, Eta: 2, Epochs: 1, EnvHosts: 1,
		LatencyMedian: time.Millisecond, LatencyP99: 10 * time.Millisecond, Seeds: 0}
	if err := noSeeds.Validate(); err == nil || !strings.Contains(err.Error(), "--seeds") {
		t.Fatalf("--seeds 0: err = %v, want one that names --seeds", err)
	}
	badScale := &benchScaleCmd{Replicas: []int{0}, Tasks: []string{"db"}, Episodes: 1, GroupSize: 8, BatchSize: 64, Concurrency: 8, Epochs: 1, EnvHosts: 1}
	if err := badScale.Validate(); err == nil {
		t.Fatal("bad scale flags accepted")
	}
	badMemory := &benchMemoryCmd{Minutes: 0, Warmup: -time.Second, SampleEvery: time.Millisecond, Tasks: []string{"nope"}, LogLevel: "loud", StopTimeout: time.Second}
	if err := badMemory.Validate(); err == nil {
		t.Fatal("bad memory flags accepted")
	}
}

var (
	serviceBinOnce sync.Once
	serviceBinDir  string
	serviceBinErr  error
)

// benchServiceBinaries is a folder holding the five service binaries: $JETRL_BIN (make test-e2e builds them
// there), or a fresh build of them, once per test binary.
func benchServiceBinaries(t *testing.T) string {
	t.Helper()
	serviceBinOnce.Do(func() {
		if d := os.Getenv("JETRL_BIN"); d != "" {
			serviceBinDir = d
			return
		}
		dir, err := os.MkdirTemp("", "jetrl-bench-bin-")
		if err != nil {
			serviceBinErr = err
			return
		}
		serviceBinDir = dir
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		for _, s := range memServices {
			args = append(args, "github.com/jetrl/jetrl/services/"+s+"/cmd/jetrl-"+s)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			serviceBinErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if serviceBinErr != nil {
		t.Fatal(serviceBinErr)
	}
	return serviceBinDir
}

// TestMain removes the service binaries the memory tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if serviceBinDir != "" && os.Getenv("JETRL_BIN") == "" {
		os.RemoveAll(serviceBinDir)
	}
	os.Exit(code)
}

// benchChildren lists this process's child processes whose command starts with prefix.
func benchChildren(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(string(b[end+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) && strings.HasPrefix(string(b[open+1:end]), prefix) {
			out = append(out, fmt.Sprintf("%s %s (%s)", e.Name(), b[open+1:end], fields[0]))
		}
	}
	return out
}

// benchGoroutinesBack waits until no more goroutines run than before (a leak fails the test).
func benchGoroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the run:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A short memory run with the services as processes: the JSON has every service with a positive RSS at
// start, end and max, and the run trained episodes. No timing or growth is asserted.
func TestBenchMemorySmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench memory reads /proc")
	}
	out := t.TempDir()
	c := &benchMemoryCmd{
		Minutes: 0.25, Warmup: 5 * time.Second, SampleEvery: 2 * time.Second, Tasks: []string{"alfworld", "db", "kg", "os", "webshop"},
		Seed: 1, Bin: benchServiceBinaries(t), Out: out, JSON: true, LogLevel: "info", StopTimeout: 30 * time.Second,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := benchChildren(t, "jetrl-"); len(left) > 0 {
		t.Errorf("service processes still there after the run: %v", left)
	}
	benchGoroutinesBack(t, goroutines)
	obj := benchJSON(t, res)
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("bench memory --json:\n%s", b)
	services, ok := obj["services"].(map[string]any)
	if !ok {
		t.Fatalf("services = %v, want an object keyed by service", obj["services"])
	}
	for _, name := range []string{"env", "rollout", "replay-buffer", "advantage-normalizer", "trainer"} {
		s, ok := services[name].(map[string]any)
		if !ok {
			t.Errorf("services has no %q: %v", name, services)
			continue
		}
		for _, k := range []string{"rss_start_mb", "rss_end_mb", "rss_max_mb"} {
			benchWantPositive(t, s, k)
		}
		for _, k := range []string{"growth_pct", "slope_mb_per_10min"} {
			if _, ok := s[k].(float64); !ok {
				t.Errorf("%s: %s = %v, want a number", name, k, s[k])
			}
		}
	}
	benchWantPositive(t, obj, "minutes")
	benchWantPositive(t, obj, "episodes_trained")
	if _, ok := obj["max_growth_pct"].(float64); !ok {
		t.Errorf("max_growth_pct = %v, want a number", obj["max_growth_pct"])
	}
	for _, f := range []string{"samples.csv", "trainer.log"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("--out %s: %v", f, err)
		}
	}
	var written struct {
		Services map[string]any `json:"services"`
		Samples  []memSample    `json:"samples"`
	}
	if b, err := os.ReadFile(filepath.Join(out, "memory.json")); err != nil || json.Unmarshal(b, &written) != nil ||
		len(written.Services) != 5 || len(written.Samples) < res.WindowSamples {
		t.Errorf("--out memory.json: %v; want the result and every sample", err)
	}
}

// Cancelling a memory run (Ctrl-C) stops every service process it started and leaves no goroutine behind.
func TestBenchMemoryCancelStopsProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench memory reads /proc")
	}
	c := &benchMemoryCmd{
		Minutes: 30, Warmup: 10 * time.Minute, SampleEvery: time.Second, Tasks: []string{"db"},
		Seed: 1, Bin: benchServiceBinaries(t), JSON: true, LogLevel: "info", StopTimeout: 30 * time.Second,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	res, err := c.run(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || res != nil {
		t.Fatalf("run stopped with %v (result %v), want the context's error and no result", err, res)
	}
	if left := benchChildren(t, "jetrl-"); len(left) > 0 {
		t.Errorf("service processes still there after a cancelled run: %v", left)
	}
	benchGoroutinesBack(t, goroutines)
}

func TestBenchMemorySchedule(t *testing.T) {
	offsets, start := memSchedule(5*time.Second, 15*time.Second, 2*time.Second)
	want := []time.Duration{0, 2, 4, 5, 7, 9, 11, 13, 15, 17, 19, 20}
	if len(offsets) != len(want) || start != 3 {
		t.Fatalf("offsets %v start %d, want %v start 3", offsets, start, want)
	}
	for i := range want {
		if offsets[i] != want[i]*time.Second {
			t.Fatalf("offsets %v, want %v s", offsets, want)
		}
	}
	if offsets, start := memSchedule(0, time.Second, time.Minute); len(offsets) != 2 || start != 0 || offsets[1] != time.Second {
		t.Fatalf("no warm-up, window shorter than the period: offsets %v start %d, want [0 1s] start 0", offsets, start)
	}
}

// The summary takes start, end and max over the window only, and the slope is the least-squares fit.
func TestBenchMemorySummary(t *testing.T) {
	var samples []memSample
	for i, rss := range []float64{500, 100, 102, 101, 104, 103, 106} { // the first is warm-up
		samples = append(samples, memSample{Seconds: 60 * float64(i), RSSMB: map[string]float64{"env": rss, "trainer": 200}, EpisodesTrained: int64(10 * i), Version: int64(i)})
	}
	res := memSummarize(samples, 1, map[string]int{"env": 7})
	env := res.Services["env"]
	if env.RSSStartMB != 100 || env.RSSEndMB != 106 || env.RSSMaxMB != 106 || math.Abs(env.GrowthPct-6) > 1e-9 {
		t.Errorf("env %+v: want start 100, end 106, max 106, growth 6%%", env)
	}
	// xs 0..5 min, ys 100 102 101 104 103 106: Sxy = 18, Sxx = 17.5, so 18/17.5 MB per minute.
	if want := 10 * 18 / 17.5; math.Abs(env.SlopeMBPer10Min-want) > 1e-9 {
		t.Errorf("slope %v MB/10 min, want %v", env.SlopeMBPer10Min, want)
	}
	if res.MaxGrowthService != "env" || res.Minutes != 5 || res.EpisodesInWindow != 50 || res.VersionStart != 1 || res.VersionEnd != 6 {
		t.Errorf("result %+v", res)
	}
	if tr := res.Services["trainer"]; tr.GrowthPct != 0 || tr.SlopeMBPer10Min != 0 {
		t.Errorf("flat trainer %+v: want no growth and slope 0", tr)
	}
	// Halves of the 5-minute window: 0, 1, 2 min (100 102 101) and 3, 4, 5 min (104 103 106, slope 1 MB/min).
	if env.RSSMaxEarlyMB != 102 || env.RSSMaxLateMB != 106 || math.Abs(env.SlopeLateMBPer10Min-10) > 1e-9 {
		t.Errorf("env halves %+v: want max 102 then 106, late slope 10 MB/10 min", env)
	}
}

// --from summarises an earlier run's memory.json as the run itself did, window from its start sample.
func TestBenchMemoryFromFile(t *testing.T) {
	var samples []memSample
	for i, rss := range []float64{500, 100, 102, 101, 104, 103, 106} {
		phase := "run"
		switch i {
		case 0:
			phase = "warmup"
		case 1:
			phase = "start"
		case 6:
			phase = "end"
		}
		samples = append(samples, memSample{Seconds: 60 * float64(i), Phase: phase, RSSMB: map[string]float64{"env": rss}, Version: int64(i)})
	}
	want := memSummarize(samples, 1, map[string]int{"env": 7})
	want.Tasks, want.WarmupSeconds, want.SampleEverySec = []string{"db"}, 60, 60
	b, err := json.Marshal(struct {
		*memoryBenchResult
		Samples []memSample `json:"samples"`
	}{want, samples})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "memory.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := memFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := *got.Services["env"], *want.Services["env"]; g.RSSStartMB != w.RSSStartMB || g.SlopeLateMBPer10Min != w.SlopeLateMBPer10Min || g.PID != 7 ||
		got.Minutes != want.Minutes || !slices.Equal(got.Tasks, want.Tasks) {
		t.Errorf("from file: %+v %+v, want %+v %+v", got, g, want, w)
	}
	if err := os.WriteFile(path, []byte(`{"samples":[{"phase":"warmup"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := memFromFile(path); err == nil || !strings.Contains(err.Error(), "no window") {
		t.Errorf("a file without a window: err = %v", err)
	}
}

func TestBenchMemoryParse(t *testing.T) {
	mb, err := memParseVmRSS([]byte("Name:\tjetrl-env\nVmPeak:\t 1000 kB\nVmRSS:\t   51200 kB\nRssAnon:\t 1 kB\n"))
	if err != nil || mb != 50 {
		t.Fatalf("VmRSS: %v MB, %v; want 50 MB", mb, err)
	}
	if _, err := memParseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Fatal("status without VmRSS accepted")
	}
	heap, err := memParseHeapInuse(strings.NewReader("# HELP go_memstats_heap_inuse_bytes x\n# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 4.194304e+06\n"))
	if err != nil || heap != 4 {
		t.Fatalf("heap in use: %v MB, %v; want 4 MB", heap, err)
	}
}

// The 30-minute run README reports (testdata/memory-30min.json) summarises to its window: 30 minutes of
// 61 samples from the start sample, every service present, each half's largest RSS within the run's max.
func TestBenchMemoryThirtyMinuteRun(t *testing.T) {
	res, err := memFromFile(filepath.Join("testdata", "memory-30min.json"))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.Minutes-30) > 0.1 || res.WindowSamples != 61 || len(res.Services) != len(memServiceOrder) {
		t.Fatalf("window %v min, %d samples, %d services: want 30 min, 61 samples, 5 services", res.Minutes, res.WindowSamples, len(res.Services))
	}
	for name, r := range res.Services {
		if r.RSSMaxMB != max(r.RSSMaxEarlyMB, r.RSSMaxLateMB) || r.RSSStartMB <= 0 {
			t.Errorf("%s %+v: the max is not one of the halves'", name, r)
		}
	}
}

func TestStaleByTaskString(t *testing.T) {
	if got := staleByTaskString(nil); got != "" {
		t.Errorf("no drops: %q, want nothing", got)
	}
	if got, want := staleByTaskString(map[string]int64{"webshop": 40, "db": 3}), " (replay-buffer: db 3, webshop 40)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The paired difference of held-out success: mean, sample std and Student's t 95% interval, by hand.
func TestPairedInterval(t *testing.T) {
	mean, std, ci := pairedInterval([]float64{0.02, -0.04, 0.05, 0.01})
	// mean 0.01; squared deviations 1e-4, 25e-4, 16e-4, 0 -> std sqrt(42e-4/3); t(3, 0.975) = 3.182446
	wantStd := math.Sqrt(0.0042 / 3)
	half := 3.182446 * wantStd / 2
	if math.Abs(mean-0.01) > 1e-12 || math.Abs(std-wantStd) > 1e-12 || math.Abs(ci[0]-(0.01-half)) > 1e-6 || math.Abs(ci[1]-(0.01+half)) > 1e-6 {
		t.Fatalf("pairedInterval = %v, %v, %v; want 0.01, %v, [%v, %v]", mean, std, ci, wantStd, 0.01-half, 0.01+half)
	}
	if _, _, ci := pairedInterval([]float64{0.1}); !math.IsInf(ci[0], -1) || !math.IsInf(ci[1], 1) {
		t.Fatalf("one pair: interval %v, want the whole line", ci)
	}
	if m, _, _ := pairedInterval([]float64{0.1, math.NaN()}); !math.IsNaN(m) {
		t.Fatalf("a NaN difference gave mean %v", m)
	}
}

// Pooled runs are compared by a one-way analysis of variance of their pairs' held-out differences.
func TestCompareRuns(t *testing.T) {
	pairs := func(diffs ...float64) []*asyncPair {
		out := make([]*asyncPair, len(diffs))
		for i, d := range diffs {
			out[i] = &asyncPair{HeldOutSync: 0.5, HeldOutAsync: 0.5 + d}
		}
		return out
	}
	// Along the window, twice the end's differences: the same F, the runs' means doubled.
	withCurves := func(ps []*asyncPair) []*asyncPair {
		for _, p := range ps {
			cs, ca := 0.4, 0.4+2*(p.HeldOutAsync-p.HeldOutSync)
			p.HeldOutCurveSync, p.HeldOutCurveAsync = &cs, &ca
		}
		return ps
	}
	// Means 0.2, 0.1, 0.0 over 2, 2, 3 pairs, grand mean 0.6/7: between-runs sum of squares 0.34/7 on 2
	// degrees of freedom, within 0.12 on 4, F = 17/21; with 2 numerator degrees of freedom the F
	// distribution's tail is (1 + 2F/4)^-2.
	r := compareRuns([]string{"a", "b", "c"}, []int{2, 2, 3}, pairs(0.1, 0.3, 0.0, 0.2, -0.2, 0.0, 0.2))
	wantF := 17.0 / 21
	wantP := math.Pow(1+2*wantF/4, -2)
	if r == nil || r.DF1 != 2 || r.DF2 != 4 || math.Abs(r.F-wantF) > 1e-9 || math.Abs(r.P-wantP) > 1e-9 || len(r.Runs) != 3 ||
		r.Runs[0].From != "a" || math.Abs(r.Runs[0].Mean-0.2) > 1e-9 || r.Runs[2].Pairs != 3 || math.Abs(r.Runs[2].Mean) > 1e-9 {
		t.Errorf("compareRuns = %+v; want runs a, b, c at means 0.2, 0.1, 0, F(2, 4) = %v, p = %v", r, wantF, wantP)
	}
	if r.CurveF != nil || r.Runs[0].CurveMean != nil {
		t.Errorf("compareRuns without curves compared them: %+v", r)
	}
	r = compareRuns([]string{"a", "b", "c"}, []int{2, 2, 3}, withCurves(pairs(0.1, 0.3, 0.0, 0.2, -0.2, 0.0, 0.2)))
	if r == nil || r.CurveF == nil || math.Abs(*r.CurveF-wantF) > 1e-9 || math.Abs(*r.CurveP-wantP) > 1e-9 ||
		r.Runs[0].CurveMean == nil || math.Abs(*r.Runs[0].CurveMean-0.4) > 1e-9 || math.Abs(r.F-wantF) > 1e-9 {
		t.Errorf("compareRuns with curves = %+v; want along the window F(2, 4) = %v, p = %v, run a's mean 0.4", r, wantF, wantP)
	}
	// Runs far apart against a small spread within each: p near 0.
	if r := compareRuns([]string{"a", "b"}, []int{3, 3}, pairs(0.30, 0.31, 0.29, -0.30, -0.31, -0.29)); r == nil || r.P > 1e-6 {
		t.Errorf("runs 60 points apart, 1 point spread: %+v, want p near 0", r)
	}
	// No comparison from one run, or without a spread within runs to measure by.
	if r := compareRuns([]string{"a"}, []int{3}, pairs(0.1, 0.2, 0.3)); r != nil {
		t.Errorf("one run compared: %+v", r)
	}
	if r := compareRuns([]string{"a", "b"}, []int{2, 2}, pairs(0.1, 0.1, 0.2, 0.2)); r != nil {
		t.Errorf("runs without a spread within compared: %+v", r)
	}
}

// --versus compares two pools' async - sync held-out differences: over every pair by Welch's interval,
// and paired by the seeds both pools hold once.
func TestCompareVersus(t *testing.T) {
	pair := func(seed uint64, d, sync float64) *asyncPair {
		cs, ca := sync, sync+2*d // along the window, twice the end's difference
		return &asyncPair{Seed: seed, HeldOutSync: 0.5, HeldOutAsync: 0.5 + d, HeldOutCurveSync: &cs, HeldOutCurveAsync: &ca}
	}
	from := &asyncBenchResult{Pairs: []*asyncPair{pair(1, 0.1, 0.4), pair(2, 0.2, 0.4), pair(3, 0.3, 0.4), pair(4, 0.2, 0.4)}}
	// Seed 4 twice in versus: not paired; seed 5 only in versus: not paired either.
	versus := &asyncBenchResult{Pairs: []*asyncPair{pair(1, 0.2, 0.4), pair(2, 0.2, 0.5), pair(3, 0.5, 0.4), pair(4, 0.0, 0.4), pair(4, 0.1, 0.4), pair(5, 0.3, 0.4)}}
	for i, p := range append(slices.Clone(from.Pairs), versus.Pairs...) {
		p.Async = &trialResult{DroppedStale: 100}
		if i >= len(from.Pairs) {
			p.Async.DroppedStale += int64(30 * (i - len(from.Pairs))) // versus seeds 1, 2, 3: +0, +30, +60
		}
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	half := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: 2}.Quantile(0.975) * 0.1 / math.Sqrt(3) // t(0.975, 2) = 4.3027
	v := compareVersus(from, versus, []string{"v.json"})
	if d := v.PairedDroppedStale; d == nil || !near(d.Delta, 30) || !near(d.From, 100) || !near(d.CI95[1]-d.Delta, 300*half) {
		t.Errorf("paired stale drops %+v; want +30, its interval the end's times 300", d)
	}
	// Paired over seeds 1-3: deltas 0.1, 0.0, 0.2, mean 0.1, std 0.1 on 2 degrees of freedom.
	if v.Seeds != 3 || v.Pairs != 6 || v.PairedEnd == nil || !near(v.PairedEnd.Delta, 0.1) || !near(v.PairedEnd.From, 0.2) ||
		!near(v.PairedEnd.Versus, 0.3) || !near(v.PairedEnd.CI95[0], 0.1-half) || !near(v.PairedEnd.CI95[1], 0.1+half) {
		t.Errorf("paired end %+v over %d seeds; want seeds 1-3, delta 0.1 [%v, %v]", v.PairedEnd, v.Seeds, 0.1-half, 0.1+half)
	}
	if v.PairedCurve == nil || !near(v.PairedCurve.Delta, 0.2) || !near(v.PairedCurve.CI95[1], 0.2+2*half) {
		t.Errorf("paired curve %+v; want twice the end's delta and interval", v.PairedCurve)
	}
	// Seed 2's sync curve rose 0.1 in versus: sync alone +0.1/3; async alone the rest.
	if v.PairedCurveSync == nil || !near(v.PairedCurveSync.Delta, 0.1/3) || v.PairedCurveAsync == nil || !near(v.PairedCurveAsync.Delta, 0.2+0.1/3) {
		t.Errorf("each mode alone: sync %+v, async %+v; want +%v and +%v", v.PairedCurveSync, v.PairedCurveAsync, 0.1/3, 0.2+0.1/3)
	}
	// Every pair: from 0.1, 0.2, 0.3, 0.2 (mean 0.2, variance 0.02/3); versus 0.2, 0.2, 0.5, 0.0, 0.1, 0.3
	// (mean 1.3/6, variance (0.43 - 6*(1.3/6)^2)/5). Welch's degrees of freedom from those.
	va, vb := 0.02/3/4, (0.43-6*(1.3/6)*(1.3/6))/5/6
	df := (va + vb) * (va + vb) / (va*va/3 + vb*vb/5)
	wh := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(0.975) * math.Sqrt(va+vb)
	if v.End == nil || !near(v.End.Delta, 1.3/6-0.2) || !near(v.End.CI95[0], 1.3/6-0.2-wh) || !near(v.End.CI95[1], 1.3/6-0.2+wh) {
		t.Errorf("every pair %+v; want delta %v, half-width %v on %.2f degrees of freedom", v.End, 1.3/6-0.2, wh, df)
	}
	// Without curves, nothing along the window; one seed in common is too few to pair.
	noCurve := &asyncBenchResult{Pairs: []*asyncPair{{Seed: 1, HeldOutSync: 0.5, HeldOutAsync: 0.6}, {Seed: 9, HeldOutSync: 0.5, HeldOutAsync: 0.4}}}
	v = compareVersus(from, noCurve, nil)
	if v.Curve != nil || v.Seeds != 1 || v.PairedEnd != nil || v.End == nil {
		t.Errorf("versus pairs without curves, one seed in common: %+v; want the end compared, nothing along the window, nothing paired", v)
	}
}

// The calibration stops when more epochs stop making the trainer busier, and then chooses the fewest epochs
// within a point of the busiest run: past the plateau, epochs only slow both modes. It gives up no point
// that would take the trainer under the 95% target.
func TestCalibrationStopsAtAPlateau(t *testing.T) {
	run := func(epochs int, busy float64) asyncCalibRun { return asyncCalibRun{Epochs: epochs, TrainerBusy: busy} }
	for _, tc := range []struct {
		name    string
		runs    []asyncCalibRun
		plateau bool
		chosen  int
	}{
		{"one run", []asyncCalibRun{run(4, 0.70)}, false, 4},
		{"rising", []asyncCalibRun{run(4, 0.70), run(8, 0.90)}, false, 8},
		{"levelled", []asyncCalibRun{run(4, 0.70), run(8, 0.951), run(16, 0.954)}, true, 8},
		{"fell", []asyncCalibRun{run(4, 0.70), run(8, 0.96), run(16, 0.95)}, true, 8},
		{"within a point, fewest", []asyncCalibRun{run(4, 0.70), run(8, 0.955), run(12, 0.962)}, false, 8},
		{"beyond a point", []asyncCalibRun{run(4, 0.70), run(8, 0.94), run(12, 0.955)}, false, 12},
		{"within a point but under 95%", []asyncCalibRun{run(4, 0.70), run(8, 0.945), run(12, 0.955)}, false, 12},
		// Under 95% a run with more epochs and no busier is the machine's speed moving, not a plateau:
		// the calibration goes on (and, out of runs, takes the busiest).
		{"levelled under 95%", []asyncCalibRun{run(4, 0.70), run(16, 0.937), run(18, 0.940)}, false, 18},
		{"fell under 95%", []asyncCalibRun{run(4, 0.70), run(16, 0.940), run(18, 0.938)}, false, 16},
		{"fell at 83%", []asyncCalibRun{run(4, 0.451), run(8, 0.834), run(11, 0.807)}, false, 8},
	} {
		if got := plateaued(tc.runs); got != tc.plateau {
			t.Errorf("%s: plateaued %v, want %v", tc.name, got, tc.plateau)
		}
		if got := chooseEpochs(tc.runs); got != tc.chosen {
			t.Errorf("%s: chose %d epochs, want %d", tc.name, got, tc.chosen)
		}
	}
}

// Near the target the busy fraction grows slowly with the epochs, so the calibration steps by at least an
// eighth: the runs 4, 8, 10, 11, 12 epochs that once ended the calibration at 96.1% now go 4, 8, 10, 12, 14.
func TestCalibrationStepsAtLeastAnEighth(t *testing.T) {
	for _, tc := range []struct {
		epochs int
		busy   float64
		want   int
	}{
		{4, 0.548, 8},   // the square of the shortfall (12.5) is capped at twice the epochs
		{8, 0.869, 10},  // the square of the shortfall: 9.97
		{10, 0.934, 12}, // the square gives 10.8, an eighth more 11.25
		{12, 0.948, 14}, // the square gives 12.6, an eighth more 13.5
		{16, 0.96, 18},
		{2, 0.96, 3},   // one more at least
		{30, 0.90, 32}, // never past calibrateMaxEpochs
	} {
		if got := nextEpochs(tc.epochs, tc.busy, 0.97); got != tc.want {
			t.Errorf("after %d epochs at %.1f%%: next %d, want %d", tc.epochs, 100*tc.busy, got, tc.want)
		}
	}
}

// A check that reads the trainer busy but slower per turn than the calibration's chosen run tries the
// epochs that take the chosen run's work per turn at its pace. Seed 135 of 2026-12-07: 12 epochs at 54.3
// µs per turn and epoch against the chosen run's 12 at 37.2 ran the pair at 2.66x.
func TestRecalibrationLowersTheEpochsOfASlowerMachine(t *testing.T) {
	ref := asyncCalibRun{Epochs: 12, UpdatePace: 37.2, TrainerBusy: 0.983}
	cal := &asyncCalibration{ChosenEpochs: 12, Runs: []asyncCalibRun{{Epochs: 8, UpdatePace: 42.7}, ref, {Epochs: 14, UpdatePace: 40}}}
	if got := cal.chosenRun(); got != ref {
		t.Fatalf("chosen run %+v, want %+v", got, ref)
	}
	for _, tc := range []struct {
		epochs int
		pace   float64
		want   int
	}{
		{12, 54.3, 9},  // 446 µs per turn against 367 in the chosen run: 367/54.3 = 8.2
		{12, 46.0, 12}, // 24% slower: within recalibrateSlower
		{12, 30.0, 12}, // faster: the busy check stands (a waiting trainer is raised instead)
		{16, 40.0, 12}, // raised before on a faster machine, now 43% past the chosen run's work
		{1, 500, 1},    // never under one epoch
		{12, 0, 12},    // no pace measured
	} {
		if got := lowerEpochs(tc.epochs, tc.pace, ref); got != tc.want {
			t.Errorf("%d epochs at %.1f µs: %d, want %d", tc.epochs, tc.pace, got, tc.want)
		}
	}
	if got := lowerEpochs(12, 54.3, asyncCalibRun{}); got != 12 {
		t.Errorf("without a chosen run: %d epochs, want 12", got)
	}
	if got := (&asyncCalibration{ChosenEpochs: 3}).chosenRun(); got != (asyncCalibRun{}) {
		t.Errorf("chosen run of a calibration without one: %+v", got)
	}
}
