package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
)

// poolAsyncResults reads earlier bench async-vs-sync --json outputs and summarises all their pairs as one
// run with those pairs would have: the paired held-out interval over every pair, the means of the rates and
// busy fractions, the largest staleness. A seed may appear more than once (repeats are pairs of their own).
// The runs' workloads must agree on every setting but the seed; their epochs may differ only where each run
// chose its own by calibration.
func poolAsyncResults(paths []string) (*asyncBenchResult, error) {
	var first, out *asyncBenchResult
	var errs []error
	epochs := map[int]bool{}
	for _, path := range paths {
		res, err := readAsyncResult(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if first == nil {
			first = res
			out = &asyncBenchResult{Eta: res.Eta, Workload: res.Workload}
			out.Workload.Calibration = nil
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
		out.Pairs = append(out.Pairs, res.Pairs...)
		out.Workload.PooledFrom = append(out.Workload.PooledFrom, path)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(epochs) > 1 {
		out.Workload.Epochs, out.Workload.LearningRate = 0, 0
	}
	if err := out.summarize(); err != nil {
		return nil, fmt.Errorf("pooling %s: %w", strings.Join(paths, ", "), err)
	}
	return out, nil
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

// sameAsyncWorkload reports the settings in which res's workload differs from first's. The seed never
// counts; the epochs and the learning rate (which --lr-epochs derives from them) do not when both runs
// calibrated their epochs.
func sameAsyncWorkload(first, res *asyncBenchResult) error {
	a, b := first.Workload, res.Workload
	calibrated := a.Calibration != nil && b.Calibration != nil
	a.Seed, b.Seed = 0, 0
	a.Calibration, b.Calibration = nil, nil
	a.PooledFrom, b.PooledFrom = nil, nil
	if calibrated {
		a.Epochs, b.Epochs, a.LearningRate, b.LearningRate = 0, 0, 0, 0
	}
	var diff []string
	if first.Eta != res.Eta {
		diff = append(diff, fmt.Sprintf("eta %d, not %d", res.Eta, first.Eta))
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
			diff = append(diff, fmt.Sprintf("%s %v, not %v", name, vb.Field(i).Interface(), va.Field(i).Interface()))
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("workload differs from the first run's: %s", strings.Join(diff, "; "))
	}
	return nil
}
