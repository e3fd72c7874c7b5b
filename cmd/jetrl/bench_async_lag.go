package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// heldOutLag reads the asynchronous mode's held-out curve as the synchronous one delayed: Episodes is the
// delay D, in trained episodes, at which each pair's synchronous curve read D episodes before the
// asynchronous curve's points has, on the mean over pairs and points after the window's start, the
// asynchronous curve's level (negative: the asynchronous curve leads). Staleness predicts a delay of a few
// batches: the asynchronous mode trains on episodes that versions up to eta behind played. The
// synchronous curve is read between its points linearly and flat beyond its ends, so a delay is only as
// fine as the curve's points allow.
type heldOutLag struct {
	Episodes float64 `json:"episodes"`
	// Batches is Episodes over the batch size (0 when the workload does not name one).
	Batches float64 `json:"batches"`
	// CI95 is the 2.5th and 97.5th percentiles of the delay over lagResamples resamples of the pairs
	// (nil with fewer than lagMinPairs pairs, or when the curves of one resample in twenty or more read
	// as no delay).
	CI95 *[2]float64 `json:"ci95,omitempty"`
	// Points are, per point after the window's start, the mean over pairs of async - sync held-out
	// success at the point and of what the delayed synchronous curve gives there instead of async.
	Points []heldOutLagPoint `json:"points"`
}

type heldOutLagPoint struct {
	Observed  float64 `json:"async_minus_sync"`
	Predicted float64 `json:"delayed_sync_minus_sync"`
}

const (
	lagResamples = 2000
	lagMinPairs  = 5
)

// lagCurve is one pair's curves after the window's start: the synchronous curve's points (xs, ys) and the
// asynchronous curve's (ax, ay), point for point; span is the farthest any point lies from either end of
// the synchronous curve (the delays worth trying lie within it either way).
type lagCurve struct {
	xs, ys, ax, ay []float64
	span           float64
}

// syncAt reads the synchronous curve at x: linearly between its points, flat beyond its ends.
func (c *lagCurve) syncAt(x float64) float64 {
	n := len(c.xs)
	if x <= c.xs[0] {
		return c.ys[0]
	}
	if x >= c.xs[n-1] {
		return c.ys[n-1]
	}
	i, _ := slices.BinarySearch(c.xs, x)
	x0, x1, y0, y1 := c.xs[i-1], c.xs[i], c.ys[i-1], c.ys[i]
	if x1 == x0 {
		return y1
	}
	return y0 + (y1-y0)*(x-x0)/(x1-x0)
}

// lagCurves are the pairs' curves, or nil unless every pair has curves of one number of points (two or
// more) in both modes, with the synchronous points in increasing order of trained episodes.
func lagCurves(pairs []*asyncPair) []lagCurve {
	var out []lagCurve
	points := -1
	for _, p := range pairs {
		if p.Sync == nil || p.Async == nil {
			return nil
		}
		s, a := p.Sync.HeldOutCurve, p.Async.HeldOutCurve
		if len(s) < 2 || len(a) != len(s) || (points >= 0 && len(s) != points) {
			return nil
		}
		points = len(s)
		var c lagCurve
		for i := range s {
			c.xs, c.ys = append(c.xs, float64(s[i].EpisodesTrained)), append(c.ys, s[i].Success)
			c.ax, c.ay = append(c.ax, float64(a[i].EpisodesTrained)), append(c.ay, a[i].Success)
			if i > 0 && c.xs[i] <= c.xs[i-1] {
				return nil
			}
		}
		first, last := c.xs[0], c.xs[len(c.xs)-1]
		for _, x := range c.ax {
			c.span = max(c.span, math.Abs(x-first), math.Abs(last-x))
		}
		c.span = max(c.span, last-first)
		out = append(out, c)
	}
	return out
}

// lagGap is the mean over the curves (each weighted as often as idx names it) and their points after the
// start of async - the synchronous curve read d episodes earlier: it rises with d while the synchronous
// curves rise.
func lagGap(curves []lagCurve, idx []int, d float64) float64 {
	var sum float64
	var n int
	for _, i := range idx {
		c := &curves[i]
		for k := 1; k < len(c.xs); k++ {
			sum += c.ay[k] - c.syncAt(c.ax[k]-d)
			n++
		}
	}
	return sum / float64(n)
}

// lagSolve finds the delay at which lagGap is zero, within the curves' span either way, or reports false
// when the gap does not change sign there, or is zero throughout (flat curves, nothing to read). Where the
// gap is zero over a stretch of delays (a plateau, or curves that dip), it is the middle of the lowest and
// the highest zero, found by bisection each, or the stretch's inner end when it reaches the span's.
func lagSolve(curves []lagCurve, idx []int) (float64, bool) {
	var span float64
	for _, i := range idx {
		span = max(span, curves[i].span)
	}
	lo, hi := -span, span
	glo, ghi := lagGap(curves, idx, lo), lagGap(curves, idx, hi)
	if glo > 0 || ghi < 0 || (glo == 0 && ghi == 0) {
		return 0, false
	}
	// The lowest delay with the gap at zero or above, and the highest with it at zero or below.
	bisect := func(below func(g float64) bool) float64 {
		a, b := lo, hi
		for range 50 {
			mid := (a + b) / 2
			if below(lagGap(curves, idx, mid)) {
				a = mid
			} else {
				b = mid
			}
		}
		return (a + b) / 2
	}
	low := bisect(func(g float64) bool { return g < 0 })
	high := bisect(func(g float64) bool { return g <= 0 })
	// A stretch reaching the span's end is bounded on one side only (the curves flat there): its other
	// end is the delay they show.
	const edge = 1 // episodes
	switch {
	case low <= lo+edge:
		return high, true
	case high >= hi-edge:
		return low, true
	}
	return (low + high) / 2, true
}

// heldOutLagOf is the pairs' heldOutLag, or nil when lagCurves has none or no delay levels the curves.
func heldOutLagOf(pairs []*asyncPair, batchSize int) *heldOutLag {
	curves := lagCurves(pairs)
	if len(curves) == 0 {
		return nil
	}
	all := make([]int, len(curves))
	for i := range all {
		all[i] = i
	}
	d, ok := lagSolve(curves, all)
	if !ok {
		return nil
	}
	out := &heldOutLag{Episodes: d}
	if batchSize > 0 {
		out.Batches = d / float64(batchSize)
	}
	points := len(curves[0].xs)
	out.Points = make([]heldOutLagPoint, points-1)
	for _, c := range curves {
		for k := 1; k < points; k++ {
			out.Points[k-1].Observed += (c.ay[k] - c.ys[k]) / float64(len(curves))
			out.Points[k-1].Predicted += (c.syncAt(c.ax[k]-d) - c.ys[k]) / float64(len(curves))
		}
	}
	if len(curves) >= lagMinPairs {
		// A fixed seed: the same pairs give the same interval.
		rng := rand.New(rand.NewPCG(0x6a657472, uint64(len(curves))))
		idx := make([]int, len(curves))
		var ds []float64
		for range lagResamples {
			for i := range idx {
				idx[i] = rng.IntN(len(curves))
			}
			if v, ok := lagSolve(curves, idx); ok {
				ds = append(ds, v)
			}
		}
		if len(ds)*20 > lagResamples*19 {
			slices.Sort(ds)
			out.CI95 = &[2]float64{stat.Quantile(0.025, stat.LinInterp, ds, nil), stat.Quantile(0.975, stat.LinInterp, ds, nil)}
		}
	}
	return out
}

// String is the readout's line for the lag.
func (l *heldOutLag) String(eta int) string {
	obs, pred := make([]string, len(l.Points)), make([]string, len(l.Points))
	for i, p := range l.Points {
		obs[i], pred[i] = fmt.Sprintf("%+.1f", 100*p.Observed), fmt.Sprintf("%+.1f", 100*p.Predicted)
	}
	ci := ""
	if l.CI95 != nil {
		ci = fmt.Sprintf(", 95%% interval [%.0f, %.0f] over resampled pairs", l.CI95[0], l.CI95[1])
	}
	batches := ""
	if l.Batches != 0 {
		batches = fmt.Sprintf(" (%.1f batches; eta %d)", l.Batches, eta)
	}
	return fmt.Sprintf("held-out along the window as a delay: the asynchronous curve is level with the synchronous one read %.0f trained episodes earlier%s%s; "+
		"per point after the start, async - sync %s points, the delayed synchronous curve - sync %s",
		l.Episodes, batches, ci, strings.Join(obs, ", "), strings.Join(pred, ", "))
}
