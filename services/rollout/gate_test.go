package rollout_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/services/rollout"
)

func TestGateLimit(t *testing.T) {
	tests := []struct {
		givenBatch, givenEta        int
		givenVersion, givenConsumed int64
		expectedLimit               int64
	}{
		{8, 0, 0, 0, 8},  // synchronous: one batch ahead of version 0
		{8, 0, 1, 0, 16}, // each version lets one more batch start
		{8, 2, 0, 0, 24}, // eta 2: three batches may be in flight at version 0
		{64, 4, 10, 0, 960},
		{256, 1, 3, 0, 1280},
		{8, 0, 1, 8, 16},  // batches of exactly B: the same bound either way
		{8, 0, 2, 28, 36}, // batches of 16 and 12: one batch's worth beyond what the trainer took
		{256, 2, 10, 5000, 5768},
		{8, 1, 3, 20, 40}, // fewer consumed than 3·B (group dups dropped): the version bound holds
	}
	for _, tc := range tests {
		g := rollout.NewStalenessGate(nil, tc.givenBatch, tc.givenEta, func() int64 { return tc.givenVersion })
		if got := g.Limit(tc.givenVersion, tc.givenConsumed); got != tc.expectedLimit {
			t.Errorf("Limit(B=%d, eta=%d, v=%d, consumed=%d) = %d, want %d", tc.givenBatch, tc.givenEta, tc.givenVersion, tc.givenConsumed, got, tc.expectedLimit)
		}
	}
}

// A trainer that took a batch of 2B at version 1 leaves the gate room for a whole batch more, where the
// version bound alone would keep it shut until a batch that cannot fill.
func TestGateCountsConsumedEpisodes(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	var consumed atomic.Int64
	g := rollout.NewStalenessGate(m.counter(t), 8, 0, func() int64 { return 1 }).WithConsumed(consumed.Load)
	for range 2 {
		if _, err := g.Admit(ctx, 8); err != nil {
			t.Fatal(err)
		}
	}
	// 16 started at version 1: the version bound (16) is full.
	blocked := admitAsync(ctx, g, 8)
	select {
	case v := <-blocked:
		t.Fatalf("admitted at version %d with 16 started and nothing consumed", v)
	case <-time.After(200 * time.Millisecond):
	}
	consumed.Store(16) // the trainer's batch at version 1 held both groups
	select {
	case v := <-blocked:
		if v != 1 {
			t.Fatalf("admitted under version %d, want 1", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still blocked after the trainer consumed 16 episodes")
	}
}

// admitAsync runs Admit in a goroutine and reports the version it returns on the channel.
func admitAsync(ctx context.Context, g *rollout.StalenessGate, n int64) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		v, err := g.Admit(ctx, n)
		if err != nil {
			v = -100
		}
		out <- v
	}()
	return out
}

func TestGateAdmitsOneBatchThenWaitsForTheNextVersion(t *testing.T) {
	m := newMesh(t)
	var version atomic.Int64
	g := rollout.NewStalenessGate(m.counter(t), 8, 0, version.Load)
	ctx := testCtx(t)
	for i := range 8 {
		v, err := g.Admit(ctx, 1)
		if err != nil || v != 0 {
			t.Fatalf("admission %d: version %d, %v; want 0", i+1, v, err)
		}
	}
	ninth := admitAsync(ctx, g, 1)
	select {
	case v := <-ninth:
		t.Fatalf("a 9th episode was admitted (version %d) with B=8, eta=0 at version 0", v)
	case <-time.After(300 * time.Millisecond):
	}
	if a := m.admitted(t); a.Started != 8 {
		t.Fatalf("started %d while the gate is shut, want 8", a.Started)
	}
	version.Store(1)
	select {
	case v := <-ninth:
		if v != 1 {
			t.Fatalf("9th episode admitted under version %d, want 1", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gate stayed shut after the version moved to 1")
	}
	if a := m.admitted(t); a.Started != 9 {
		t.Fatalf("started %d, want 9", a.Started)
	}
}

func TestGateAdmitsWholeGroupsAndReopensOnRefund(t *testing.T) {
	m := newMesh(t)
	g := rollout.NewStalenessGate(m.counter(t), 8, 1, func() int64 { return 0 })
	ctx := testCtx(t)
	for i := range 4 { // limit (1+0+1)·8 = 16: four groups of 4
		if _, err := g.Admit(ctx, 4); err != nil {
			t.Fatalf("group %d: %v", i+1, err)
		}
	}
	blocked := admitAsync(ctx, g, 4)
	select {
	case <-blocked:
		t.Fatal("a 5th group was admitted over the limit of 16")
	case <-time.After(300 * time.Millisecond):
	}
	// Refunds of three episodes are not room for a group of four; a fourth is.
	c := m.counter(t)
	if err := c.Refund(ctx, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
		t.Fatal("a group of 4 was admitted with room for 3")
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Refund(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-blocked:
		if v != 0 {
			t.Fatalf("admitted under version %d, want 0", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("refunds did not reopen the gate")
	}
	if a := m.admitted(t); a.Started != 20 || a.Refunded != 4 {
		t.Fatalf("counter = %+v, want 20 started, 4 refunded", a)
	}
}

func TestGateAdmitsNothingBeforeTheFirstVersion(t *testing.T) {
	m := newMesh(t)
	g := rollout.NewStalenessGate(m.counter(t), 8, 2, func() int64 { return -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := g.Admit(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Admit with no version: %v, want the context's deadline", err)
	}
	if a := m.admitted(t); a.Started != 0 {
		t.Fatalf("started %d before any version", a.Started)
	}
}

// Two replicas, each with its own connection and gate, race on the shared counter: together they admit
// exactly the limit, never more.
func TestRacingGatesNeverOvershoot(t *testing.T) {
	m := newMesh(t)
	var version atomic.Int64
	gates := []*rollout.StalenessGate{
		rollout.NewStalenessGate(m.counter(t), 32, 0, version.Load),
		rollout.NewStalenessGate(m.counter(t), 32, 0, version.Load),
	}
	// Each round runs until the replicas have admitted the round's 32 episodes and 300ms more (time to
	// overshoot, were they to), or 20s.
	run := func(n int64) (admitted [2]int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var total atomic.Int64
		var wg sync.WaitGroup
		for i, g := range gates {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := g.Admit(ctx, n); err != nil {
						return // the gate stayed shut until the round ended
					}
					admitted[i] += n
					total.Add(n)
				}
			}()
		}
		for total.Load() < 32 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
		cancel()
		wg.Wait()
		return admitted
	}
	// Version 0: limit 32, claimed one episode at a time.
	got := run(1)
	if got[0]+got[1] != 32 {
		t.Fatalf("replicas admitted %v = %d episodes, want exactly 32", got, got[0]+got[1])
	}
	if got[0] == 0 || got[1] == 0 {
		t.Logf("one replica took every admission (%v); the race was not exercised this time", got)
	}
	// Version 1: limit 64, claimed in groups of 4.
	version.Store(1)
	got = run(4)
	if got[0]+got[1] != 32 {
		t.Fatalf("replicas admitted %v = %d more episodes at version 1, want exactly 32", got, got[0]+got[1])
	}
	if a := m.admitted(t); a.Started != 64 {
		t.Fatalf("counter started %d, want 64", a.Started)
	}
}

// A stopped caller claims nothing, and a stop that lands while claims are in flight never leaves one
// recorded on the counter but reported to its caller as failed: every admitted episode is one the caller
// knows to play.
func TestGateClaimsNothingOnceStopped(t *testing.T) {
	m := newMesh(t)
	g := rollout.NewStalenessGate(m.counter(t), 8, 2, func() int64 { return 1 << 20 })
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Admit(stopped, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit after stop: %v, want context.Canceled", err)
	}
	if a := m.admitted(t); a.Started != 0 {
		t.Fatalf("started %d after stop", a.Started)
	}

	var told atomic.Int64
	// 20 rounds, and more while none has admitted anything yet (a busy machine's claims take longer than
	// the windows).
	for round := 0; round < 20 || (told.Load() == 0 && round < 200); round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := g.Admit(ctx, 1); err != nil {
						return
					}
					told.Add(1)
				}
			}()
		}
		time.Sleep(time.Duration(1+round%5) * time.Millisecond)
		cancel()
		wg.Wait()
	}
	a := m.admitted(t)
	if a.Started == 0 {
		t.Fatal("nothing was admitted before the stops")
	}
	if a.Started != told.Load() {
		t.Fatalf("counter records %d started, callers were told of %d", a.Started, told.Load())
	}
}
