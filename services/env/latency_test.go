package env_test

import (
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
)

// Seeded draws of the bench's lognormal (median 20 ms, p99 400 ms) have that median and p99.
func TestLognormalMedianAndP99(t *testing.T) {
	l, err := env.NewLognormal(20*time.Millisecond, 400*time.Millisecond, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := math.Log(20) / 2.326; math.Abs(l.Sigma-want) > 1e-3 {
		t.Fatalf("sigma %v, want ln(20)/2.326 = %v", l.Sigma, want)
	}
	if q := l.Quantile(0.99); q < 399*time.Millisecond || q > 401*time.Millisecond {
		t.Fatalf("Quantile(0.99) = %v, want 400ms", q)
	}
	const n = 100_000
	draws := make([]time.Duration, n)
	var sum time.Duration
	for i := range draws {
		draws[i] = l.Draw()
		sum += draws[i]
	}
	slices.Sort(draws)
	within := func(what string, got, want time.Duration, tol float64) {
		t.Helper()
		if r := float64(got) / float64(want); r < 1-tol || r > 1+tol {
			t.Errorf("%s %v, want %v ± %.0f%%", what, got, want, 100*tol)
		}
	}
	within("median", draws[n/2], 20*time.Millisecond, 0.03)
	within("p99", draws[n*99/100], 400*time.Millisecond, 0.08)
	within("mean", sum/n, l.Mean(), 0.05)

	// The same seed gives the same draws.
	a, _ := env.NewLognormal(20*time.Millisecond, 400*time.Millisecond, 3)
	b, _ := env.NewLognormal(20*time.Millisecond, 400*time.Millisecond, 3)
	for i := 0; i < 100; i++ {
		if x, y := a.Draw(), b.Draw(); x != y {
			t.Fatalf("draw %d: %v and %v from one seed", i, x, y)
		}
	}
}

func TestLatencyConfig(t *testing.T) {
	if f, err := (env.LatencyConfig{}).StepLatency(); f != nil || err != nil {
		t.Fatalf("zero config: latency %t, error %v; want none", f != nil, err)
	}
	f, err := env.LatencyConfig{Median: 5 * time.Millisecond}.StepLatency()
	if err != nil || f() != 5*time.Millisecond {
		t.Fatalf("median only: %v; want a constant 5ms", err)
	}
	for _, bad := range []env.LatencyConfig{{P99: time.Second}, {Median: -time.Second}, {Median: time.Second, P99: time.Millisecond}} {
		if _, err := bad.StepLatency(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// A step waits out its latency without holding up other sessions.
func TestStepLatencyHoldsUpOnlyItsSession(t *testing.T) {
	f := newFixture(t)
	slow := 300 * time.Millisecond
	var calls atomic.Int32
	drawn := make(chan struct{})
	f.startHost(t, env.Config{StepLatency: func() time.Duration {
		if calls.Add(1) == 1 {
			close(drawn)
			return slow
		}
		return 0
	}}, nil)
	c := f.client(t)
	ctx := testCtx(t)
	s1, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Start(ctx, startReq(2))
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan time.Duration, 1)
	t0 := time.Now()
	go func() {
		_, _ = c.Step(ctx, s1.HostID, s1.SessionID, s1.Admissible[0])
		first <- time.Since(t0)
	}()
	select { // the slow step has drawn its latency
	case <-drawn:
	case <-time.After(10 * time.Second):
		t.Fatal("the first step never reached the host")
	}
	t1 := time.Now()
	if _, err := c.Step(ctx, s2.HostID, s2.SessionID, s2.Admissible[0]); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t1); d >= slow {
		t.Fatalf("a step of another session took %v while one session waited %v", d, slow)
	}
	if d := <-first; d < slow {
		t.Fatalf("the slow step took %v, want at least %v", d, slow)
	}
}

// Stopping the host cuts a latency wait short: Run returns at once and the step gets an error.
func TestStepLatencyEndsWhenHostStops(t *testing.T) {
	f := newFixture(t)
	drawn := make(chan struct{})
	var once sync.Once
	h := f.startHost(t, env.Config{StepLatency: func() time.Duration {
		once.Do(func() { close(drawn) })
		return time.Hour
	}}, task.Registry{alfworld.Name: alfworld.New()})
	c := f.client(t)
	ctx := testCtx(t)
	s, err := c.Start(ctx, startReq(1))
	if err != nil {
		t.Fatal(err)
	}
	stepErr := make(chan error, 1)
	go func() {
		_, err := c.Step(ctx, s.HostID, s.SessionID, s.Admissible[0])
		stepErr <- err
	}()
	select { // the step is waiting out its latency
	case <-drawn:
	case <-time.After(10 * time.Second):
		t.Fatal("the step never reached the host")
	}
	t0 := time.Now()
	h.stop()
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("host took %v to stop with a step waiting out an hour's latency", d)
	}
	select {
	case err := <-stepErr:
		if err == nil || !errors.Is(err, proto.ErrShuttingDown) {
			t.Fatalf("step during shutdown: %v, want %v", err, proto.ErrShuttingDown)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting step never returned")
	}
}
