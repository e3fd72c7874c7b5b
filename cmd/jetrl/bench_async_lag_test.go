package main

import (
	"math"
	"testing"
)

// lagPair is a pair whose synchronous curve is sync at the points xs and whose asynchronous curve, at xs
// moved by shift episodes, is sync read delay episodes earlier plus noise.
func lagPair(seed uint64, xs []int64, sync func(float64) float64, shift, delay int64, noise float64) *asyncPair {
	s, a := &trialResult{}, &trialResult{}
	for i, x := range xs {
		s.HeldOutCurve = append(s.HeldOutCurve, heldOutPoint{EpisodesTrained: x, Success: sync(float64(x))})
		ax := x
		if i > 0 {
			ax += shift
		}
		n := noise
		if i%2 == 1 {
			n = -noise
		}
		a.HeldOutCurve = append(a.HeldOutCurve, heldOutPoint{EpisodesTrained: ax, Success: sync(float64(ax-delay)) + n})
	}
	return &asyncPair{Seed: seed, Sync: s, Async: a}
}

// The asynchronous curve built as the synchronous one read 768 episodes earlier reads as a delay of 768
// episodes (3 batches of 256), whether its points fall at the synchronous curve's trained episodes or 200
// after them, with noise that cancels over the pairs; the per-point figures are the curves' differences;
// the interval over resampled pairs holds the delay. A curve ahead reads as a negative delay; pairs
// without curves, or with curves of other lengths, give none.
func TestHeldOutLag(t *testing.T) {
	xs := []int64{512, 8192, 15872, 23552}
	// Piecewise linear between the points, as the lag reads it: steep early, flatter late.
	knots := []float64{0.02, 0.40, 0.65, 0.80}
	sync := func(x float64) float64 {
		c := lagCurve{xs: []float64{512, 8192, 15872, 23552}, ys: knots}
		return c.syncAt(x)
	}
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

	var pairs []*asyncPair
	for i := range 8 {
		shift := int64(0)
		if i%2 == 1 {
			shift = 200
		}
		noise := 0.0 // +0.02, -0.02, +0.03, -0.03 in the last four pairs: none on the mean
		if i >= 4 {
			noise = 0.01 * float64(i/2)
			if i%2 == 1 {
				noise = -noise
			}
		}
		pairs = append(pairs, lagPair(uint64(i), xs, sync, shift, 768, noise))
	}
	l := heldOutLagOf(pairs, 256)
	if l == nil {
		t.Fatal("no lag from pairs with curves")
	}
	if !near(l.Episodes, 768, 1) || !near(l.Batches, 3, 0.01) {
		t.Errorf("lag %.1f episodes, %.3f batches; want 768 and 3", l.Episodes, l.Batches)
	}
	if len(l.Points) != 3 {
		t.Fatalf("points %+v, want 3 after the start", l.Points)
	}
	for k, p := range l.Points {
		var obs, pred float64
		for _, pr := range pairs {
			s, a := pr.Sync.HeldOutCurve[k+1], pr.Async.HeldOutCurve[k+1]
			obs += (a.Success - s.Success) / float64(len(pairs))
			pred += (sync(float64(a.EpisodesTrained)-768) - s.Success) / float64(len(pairs))
		}
		if !near(p.Observed, obs, 1e-9) || !near(p.Predicted, pred, 1e-3) || !(p.Observed < 0) {
			t.Errorf("point %d: %+v; want observed %.4f (< 0), predicted %.4f", k+1, p, obs, pred)
		}
	}
	if l.CI95 == nil || !(l.CI95[0] <= 768 && 768 <= l.CI95[1]) || !(l.CI95[0] < l.CI95[1]) {
		t.Errorf("interval %v, want one holding 768 (the noisy pairs widen it)", l.CI95)
	}
	if again := heldOutLagOf(pairs, 256); again.CI95 == nil || *again.CI95 != *l.CI95 {
		t.Errorf("interval %v then %v: want the same for the same pairs", l.CI95, again.CI95)
	}

	ahead := []*asyncPair{lagPair(1, xs, sync, 0, -512, 0), lagPair(2, xs, sync, 200, -512, 0)}
	if l := heldOutLagOf(ahead, 256); l == nil || !near(l.Episodes, -512, 1) || l.CI95 != nil {
		t.Errorf("curves 512 episodes ahead: %+v; want a delay of -512, no interval from 2 pairs", l)
	}

	bare := []*asyncPair{{Seed: 1, Sync: &trialResult{}, Async: &trialResult{}}}
	if l := heldOutLagOf(bare, 256); l != nil {
		t.Errorf("pairs without curves: %+v, want none", l)
	}
	short := lagPair(9, xs[:3], sync, 0, 768, 0)
	if l := heldOutLagOf(append(pairs[:2:2], short), 256); l != nil {
		t.Errorf("curves of 4 and 3 points: %+v, want none", l)
	}
	// Async far above anything the synchronous curve reaches: no delay levels them.
	high := lagPair(10, xs, func(float64) float64 { return 0.1 }, 0, 0, 0)
	for i := 1; i < len(high.Async.HeldOutCurve); i++ {
		high.Async.HeldOutCurve[i].Success = 0.9
	}
	if l := heldOutLagOf([]*asyncPair{high}, 256); l != nil {
		t.Errorf("async above the synchronous curve's reach: %+v, want none", l)
	}
}

// The synchronous curve is read linearly between its points and flat beyond its ends.
func TestLagCurveReadsBetweenPoints(t *testing.T) {
	c := lagCurve{xs: []float64{100, 200, 400}, ys: []float64{0.1, 0.5, 0.7}}
	for _, tc := range []struct{ x, want float64 }{
		{0, 0.1}, {100, 0.1}, {150, 0.3}, {200, 0.5}, {250, 0.55}, {400, 0.7}, {1000, 0.7},
	} {
		if got := c.syncAt(tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("syncAt(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

// On a synchronous curve that rises at a constant slope, the delay is the mean over the points after the
// start of the asynchronous deficit over the slope: an offset at the last point alone moves it by a third
// of its own worth, so the delay counts every point after the start and no other. Flat curves read as no
// delay at all, and a delay is the middle of the stretch where the gap is zero.
func TestHeldOutLagUsesEveryPointAfterTheStart(t *testing.T) {
	xs := []int64{512, 8192, 15872, 23552}
	const slope = 1.0 / 24000
	line := func(x float64) float64 { return slope * x }
	var pairs []*asyncPair
	for i := range 4 {
		p := lagPair(uint64(i), xs, line, int64(100*i), 768, 0)
		p.Async.HeldOutCurve[3].Success += 0.03 // the last point 0.03 above the delayed curve
		p.Async.HeldOutCurve[0].Success = 0.5   // the start, far off: not counted
		pairs = append(pairs, p)
	}
	want := 768 - 0.03/3/slope // 528
	if l := heldOutLagOf(pairs, 256); l == nil || math.Abs(l.Episodes-want) > 1 {
		t.Errorf("lag %+v, want %.0f episodes", l, want)
	}

	flat := []*asyncPair{lagPair(1, xs, func(float64) float64 { return 0 }, 0, 0, 0)}
	if l := heldOutLagOf(flat, 256); l != nil {
		t.Errorf("flat curves, async level with sync: %+v, want no delay read", l)
	}
	// A synchronous curve flat from 8,192 episodes on, the asynchronous one level with it there: every
	// delay up to 0 levels them; unbounded below, the stretch reads as its upper end, no delay.
	knee := func(x float64) float64 { return min(x, 8192) / 8192 }
	if l := heldOutLagOf([]*asyncPair{lagPair(1, xs, knee, 0, 0, 0)}, 256); l == nil || math.Abs(l.Episodes) > 1 {
		t.Errorf("level curves flat after the start: %+v; want a delay of 0", l)
	}
	// A flat middle (0.5 from 8,192 to 15,872 episodes), async at 0.5 at every point after the start: the
	// points alone would read delays of 0 (8,192), any (15,872) and 7,680 (23,552); their mean gap levels
	// between.
	mid := lagCurve{xs: []float64{512, 8192, 15872, 23552}, ys: []float64{0, 0.5, 0.5, 1}}
	p := lagPair(1, xs, mid.syncAt, 0, 0, 0)
	for i := 1; i < 4; i++ {
		p.Async.HeldOutCurve[i].Success = 0.5
	}
	// For d in [0, 7680] the gaps are 0.5·d/7680, 0 and -0.5 + 0.5·d/7680: their mean is zero at 3,840.
	if l := heldOutLagOf([]*asyncPair{p}, 256); l == nil || math.Abs(l.Episodes-3840) > 1 {
		t.Errorf("a flat middle: %+v; want a delay of 3840", l)
	}
}
