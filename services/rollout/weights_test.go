package rollout_test

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var sampleInput = policy.Input{
	Task:        "alfworld",
	Instruction: "Your task is to: put a apple in fridge 1.",
	Observation: "You are in the middle of a room. Looking quickly around you, you see a countertop 1 and a fridge 1.",
	Candidates:  []string{"take_action go to countertop 1", "take_action go to fridge 1", "take_action look", "take_action inventory"},
}

// The stale copy is the current policy as it was at the last multiple of StaleEvery versions.
func TestWeightsPoolRefreshesStaleCopyEveryStaleEvery(t *testing.T) {
	tests := []struct {
		name                  string
		givenStaleEvery       int64
		givenVersions         []int64
		expectedStaleVersions []int64 // after each Set
	}{
		{"every 3", 3, []int64{0, 1, 2, 3, 4, 5, 6, 7}, []int64{0, 0, 0, 3, 3, 3, 6, 6}},
		{"every 25, as the paper", 25, []int64{0, 1, 24, 25, 26, 49, 50}, []int64{0, 0, 0, 25, 25, 25, 50}},
		{"versions skipped", 3, []int64{0, 2, 7, 8, 9}, []int64{0, 0, 7, 7, 9}},
		{"restart mid-period", 3, []int64{4, 5, 6}, []int64{4, 4, 6}},
		{"every version (StaleEvery 0)", 0, []int64{0, 1, 2}, []int64{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// StaleProb 1: every turn that can use the stale copy does, so Act reveals its version.
			pool := rollout.NewWeightsPool(tc.givenStaleEvery, 1, false, 1)
			m := newModel(t, 1)
			for i, v := range tc.givenVersions {
				pool.Set(m, v)
				if pool.Version() != v {
					t.Fatalf("Version() = %d after Set(%d)", pool.Version(), v)
				}
				act, err := pool.Act(context.Background(), sampleInput, rollout.Draw{Turn: i})
				if err != nil {
					t.Fatal(err)
				}
				want, wantPolicy := tc.expectedStaleVersions[i], proto.PolicyStale
				if want == v {
					wantPolicy = proto.PolicyCurrent // the stale copy is the current policy: it is named current
				}
				if act.Version != want || act.Policy != wantPolicy {
					t.Fatalf("after Set(%d): turn by %s version %d, want %s version %d", v, act.Policy, act.Version, wantPolicy, want)
				}
			}
		})
	}
}

// Each turn records the policy that produced it, that policy's version, and its log-probability.
func TestWeightsPoolActRecordsPolicyAndVersion(t *testing.T) {
	old, cur := newModel(t, 1), newModel(t, 2)
	pool := rollout.NewWeightsPool(10, 0.25, false, 7)
	if _, err := pool.Act(context.Background(), sampleInput, rollout.Draw{}); err == nil {
		t.Fatal("Act before any policy was loaded succeeded")
	}
	if pool.Version() != -1 {
		t.Fatalf("Version() = %d before any load, want -1", pool.Version())
	}
	pool.Set(old, 10)
	pool.Set(cur, 11)
	counts := map[string]int{}
	const n = 2000
	for i := range n {
		act, err := pool.Act(context.Background(), sampleInput, rollout.Draw{Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		if act.Choice < 0 || act.Choice >= len(sampleInput.Candidates) || act.LogProb > 0 {
			t.Fatalf("action %+v", act)
		}
		var m *policy.Model
		switch {
		case act.Policy == proto.PolicyCurrent && act.Version == 11:
			m = cur
		case act.Policy == proto.PolicyStale && act.Version == 10:
			m = old
		default:
			t.Fatalf("turn by %s version %d; want current 11 or stale 10", act.Policy, act.Version)
		}
		if want := m.LogProb(sampleInput, act.Choice); math.Abs(act.LogProb-want) > 1e-9 {
			t.Fatalf("%s turn log-prob %v, want that policy's %v", act.Policy, act.LogProb, want)
		}
		counts[act.Policy]++
	}
	if frac := float64(counts[proto.PolicyStale]) / n; frac < 0.2 || frac > 0.3 {
		t.Fatalf("stale fraction %.3f, want about 0.25 (counts %v)", frac, counts)
	}
}

// A turn's draws (which pool member, which candidate) follow its Draw and the pool's seed, not the order in
// which turns ask: two pools of one seed, one asked in order and one asked backwards from many goroutines at
// once, act alike turn for turn; another seed, or another member of the group, acts otherwise.
func TestWeightsPoolDrawsFollowTheTurnNotTheOrder(t *testing.T) {
	old, cur := newModel(t, 1), newModel(t, 2)
	newPool := func(seed uint64) *rollout.WeightsPool {
		p := rollout.NewWeightsPool(10, 0.25, false, seed)
		p.Set(old, 10)
		p.Set(cur, 11)
		return p
	}
	var draws []rollout.Draw
	for seed := range uint64(8) {
		for member := range 4 {
			for turn := range 16 {
				draws = append(draws, rollout.Draw{Seed: 1000 + seed, Member: member, Turn: turn})
			}
		}
	}
	act := func(p *rollout.WeightsPool, d rollout.Draw) rollout.Action {
		a, err := p.Act(context.Background(), sampleInput, d)
		if err != nil {
			t.Error(err)
		}
		return a
	}
	inOrder := make([]rollout.Action, len(draws))
	p := newPool(5)
	for i, d := range draws {
		inOrder[i] = act(p, d)
	}
	backwards := make([]rollout.Action, len(draws))
	p = newPool(5)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				backwards[i] = act(p, draws[i])
			}
		}()
	}
	for i := len(draws) - 1; i >= 0; i-- {
		next <- i
	}
	close(next)
	wg.Wait()
	if !slices.Equal(inOrder, backwards) {
		t.Fatal("one seed's pool acted otherwise when the turns came in another order")
	}
	stale, choices := 0, map[int]int{}
	for _, a := range inOrder {
		if a.Policy == proto.PolicyStale {
			stale++
		}
		choices[a.Choice]++
	}
	if f := float64(stale) / float64(len(inOrder)); f < 0.18 || f > 0.32 {
		t.Fatalf("stale fraction %.3f over %d turns, want about 0.25", f, len(inOrder))
	}
	if len(choices) != len(sampleInput.Candidates) {
		t.Fatalf("choices %v: a near-uniform policy picked only some of the %d candidates", choices, len(sampleInput.Candidates))
	}
	differ := func(name string, other func(i int) rollout.Action) {
		n := 0
		for i := range draws {
			if other(i) != inOrder[i] {
				n++
			}
		}
		// A near-uniform policy over four candidates: an independent draw agrees about a quarter of the time.
		if n < len(draws)/2 {
			t.Errorf("%s: %d of %d turns acted otherwise, want most", name, n, len(draws))
		}
	}
	p = newPool(6)
	differ("another pool seed", func(i int) rollout.Action { return act(p, draws[i]) })
	q := newPool(5)
	differ("the next member", func(i int) rollout.Action {
		d := draws[i]
		d.Member = (d.Member + 1) % 4
		return act(q, d)
	})
	differ("another instance", func(i int) rollout.Action {
		d := draws[i]
		d.Seed += 8
		return act(q, d)
	})
	differ("the next turn", func(i int) rollout.Action {
		d := draws[i]
		d.Turn += 16
		return act(q, d)
	})
}

func TestWeightsPoolGreedy(t *testing.T) {
	m := newModel(t, 3)
	pool := rollout.NewWeightsPool(10, 0.9, true, 1)
	pool.Set(newModel(t, 4), 0)
	pool.Set(m, 1)
	probs := m.Probs(sampleInput)
	best := 0
	for i, p := range probs {
		if p > probs[best] {
			best = i
		}
	}
	for i := range 20 {
		act, err := pool.Act(context.Background(), sampleInput, rollout.Draw{Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		if act.Choice != best || act.Policy != proto.PolicyCurrent || act.Version != 1 || math.Abs(act.LogProb-math.Log(probs[best])) > 1e-9 {
			t.Fatalf("greedy action %+v, want candidate %d of the current policy with log-prob %v", act, best, math.Log(probs[best]))
		}
	}
}

func TestWeightsSourceLoadsAndVerifies(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	src, err := rollout.NewWeightsSource(ctx, m.js)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := src.Current(ctx); ok || err != nil {
		t.Fatalf("Current before any version: ok %v, err %v", ok, err)
	}
	pm := newModel(t, 9)
	rec := m.publishModel(t, pm, 0, "")
	got, ok, err := src.Current(ctx)
	if err != nil || !ok || got.Version != 0 || got.SHA256 != rec.SHA256 {
		t.Fatalf("Current = %+v, %v, %v", got, ok, err)
	}
	loaded, err := src.Load(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.Weights, pm.Weights) {
		t.Fatal("loaded weights differ from the published ones")
	}
	bad := rec
	bad.SHA256 = strings.Repeat("0", 64)
	if _, err := src.Load(ctx, bad); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("Load with a wrong checksum: %v", err)
	}
	missing := rec
	missing.Object = proto.WeightsObject(99)
	if _, err := src.Load(ctx, missing); err == nil {
		t.Fatal("Load of a missing object succeeded")
	}
}

func TestWeightsSourceWatchFollowsNewVersions(t *testing.T) {
	m := newMesh(t)
	src, err := rollout.NewWeightsSource(testCtx(t), m.js)
	if err != nil {
		t.Fatal(err)
	}
	pool := rollout.NewWeightsPool(25, 0, false, 1)
	var mu sync.Mutex
	var loads []int64
	loaded := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(loads)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Watch(ctx, m.js, pool, zerolog.Nop(), func(v int64) {
			mu.Lock()
			loads = append(loads, v)
			mu.Unlock()
		})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()
	m0, m1, m3 := newModel(t, 10), newModel(t, 11), newModel(t, 13)
	m.publishModel(t, m0, 0, "")
	eventually(t, 10*time.Second, "version 0", func() bool { return pool.Version() == 0 })
	m.publishModel(t, m1, 1, "")
	eventually(t, 10*time.Second, "version 1", func() bool { return pool.Version() == 1 })
	// Weights that do not match their record are not loaded.
	m.publishModel(t, newModel(t, 12), 2, strings.Repeat("f", 64))
	m.publishModel(t, m3, 3, "")
	eventually(t, 10*time.Second, "version 3", func() bool { return pool.Version() == 3 })
	// An older record (a trainer restarted from an old checkpoint, a replayed watch) never goes back.
	m.publishModel(t, m0, 0, "")
	m.publishModel(t, newModel(t, 14), 4, "")
	eventually(t, 10*time.Second, "version 4", func() bool { return pool.Version() == 4 })
	if got := loaded(); !slices.Equal(got, []int64{0, 1, 3, 4}) {
		t.Fatalf("loaded versions %v, want [0 1 3 4]", got)
	}
	act, err := pool.Act(context.Background(), sampleInput, rollout.Draw{})
	if err != nil {
		t.Fatal(err)
	}
	if act.Version != 4 {
		t.Fatalf("act by version %d, want 4", act.Version)
	}
}

// A saved checkpoint joins the pool as a fixed member: turns use it with its probability, named
// "checkpoint" with the version it had in its own run; the stale copy keeps its share of the rest.
func TestWeightsPoolCheckpointMember(t *testing.T) {
	old, cur, saved := newModel(t, 1), newModel(t, 2), newModel(t, 3)
	pool := rollout.NewWeightsPool(10, 0.25, false, 7)
	if err := pool.SetCheckpoint(saved, 500, 0.8); err == nil {
		t.Fatal("checkpoint probability 0.8 with stale probability 0.25 accepted")
	}
	if err := pool.SetCheckpoint(saved, 500, 0); err == nil {
		t.Fatal("checkpoint probability 0 accepted")
	}
	if err := pool.SetCheckpoint(saved, 500, 0.1); err != nil {
		t.Fatal(err)
	}
	pool.Set(old, 10)
	pool.Set(cur, 11)
	counts := map[string]int{}
	const n = 4000
	for i := range n {
		act, err := pool.Act(context.Background(), sampleInput, rollout.Draw{Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		var m *policy.Model
		switch {
		case act.Policy == proto.PolicyCurrent && act.Version == 11:
			m = cur
		case act.Policy == proto.PolicyStale && act.Version == 10:
			m = old
		case act.Policy == proto.PolicyCheckpoint && act.Version == 500:
			m = saved
		default:
			t.Fatalf("turn by %s version %d", act.Policy, act.Version)
		}
		if want := m.LogProb(sampleInput, act.Choice); math.Abs(act.LogProb-want) > 1e-9 {
			t.Fatalf("%s turn log-prob %v, want that policy's %v", act.Policy, act.LogProb, want)
		}
		counts[act.Policy]++
	}
	for _, c := range []struct {
		policy string
		lo, hi float64
	}{{proto.PolicyCheckpoint, 0.08, 0.12}, {proto.PolicyStale, 0.22, 0.28}, {proto.PolicyCurrent, 0.61, 0.69}} {
		if f := float64(counts[c.policy]) / n; f < c.lo || f > c.hi {
			t.Errorf("%s fraction %.3f, want in [%v, %v] (counts %v)", c.policy, f, c.lo, c.hi, counts)
		}
	}
	// Greedy evaluation uses the current policy only.
	greedy := rollout.NewWeightsPool(10, 0.25, true, 7)
	if err := greedy.SetCheckpoint(saved, 500, 0.5); err != nil {
		t.Fatal(err)
	}
	greedy.Set(cur, 11)
	for i := range 50 {
		if act, _ := greedy.Act(context.Background(), sampleInput, rollout.Draw{Seed: uint64(i)}); act.Policy != proto.PolicyCurrent {
			t.Fatalf("greedy turn by %s", act.Policy)
		}
	}
}

// LoadCheckpoint reads a saved policy and the version its object metadata records; a missing object or
// bad metadata is a clear error.
func TestWeightsSourceLoadCheckpoint(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	src, err := rollout.NewWeightsSource(ctx, m.js)
	if err != nil {
		t.Fatal(err)
	}
	saved := newModel(t, 5)
	w, err := saved.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, meta map[string]string, data []byte) {
		t.Helper()
		if _, err := src.Objects.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: meta}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	put("pool/run-a", map[string]string{rollout.CheckpointVersionKey: "868"}, w)
	got, v, err := src.LoadCheckpoint(ctx, "pool/run-a")
	if err != nil || v != 868 || !slices.Equal(got.Weights, saved.Weights) {
		t.Fatalf("LoadCheckpoint = version %d, err %v (weights equal: %v)", v, err, err == nil && slices.Equal(got.Weights, saved.Weights))
	}
	put("pool/no-version", nil, w)
	if _, v, err := src.LoadCheckpoint(ctx, "pool/no-version"); err != nil || v != 0 {
		t.Fatalf("checkpoint without version metadata: version %d, err %v", v, err)
	}
	put("pool/bad-version", map[string]string{rollout.CheckpointVersionKey: "x"}, w)
	put("pool/garbage", nil, []byte("not weights"))
	for _, name := range []string{"pool/missing", "pool/bad-version", "pool/garbage"} {
		if _, _, err := src.LoadCheckpoint(ctx, name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("LoadCheckpoint(%s): %v, want an error naming it", name, err)
		}
	}
}

// On a cluster the version record can arrive before the server that answers the read holds the weights
// ("object not found"): Watch retries the version with backoff, counts each failed attempt, and loads it
// once the weights are there, instead of staying on the old version until a newer record comes.
func TestWeightsSourceWatchRetriesAVersionWhoseWeightsAreNotThereYet(t *testing.T) {
	m := newMesh(t)
	ctx := testCtx(t)
	src, err := rollout.NewWeightsSource(ctx, m.js)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failed []int64
	src.OnLoadError = func(v int64, err error) {
		mu.Lock()
		failed = append(failed, v)
		mu.Unlock()
	}
	failures := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(failed)
	}
	pool := rollout.NewWeightsPool(25, 0, false, 1)
	watch := func() (stop func()) {
		wctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Watch(wctx, m.js, pool, zerolog.Nop(), nil) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Watch returned %v", err)
			}
		}
	}
	stop := watch()
	m.publishModel(t, newModel(t, 20), 0, "")
	eventually(t, 10*time.Second, "version 0", func() bool { return pool.Version() == 0 })
	stop()

	// Version 1's record is there, its weights not yet (as when a lagging replica answers the read).
	pm1 := newModel(t, 21)
	rec := m.publishModel(t, pm1, 1, "")
	obj, err := m.js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(ctx, rec.Object); err != nil {
		t.Fatal(err)
	}
	stop = watch()
	defer stop()
	eventually(t, 10*time.Second, "failed loads of version 1", func() bool { return len(failures()) >= 2 })
	if v := pool.Version(); v != 0 {
		t.Fatalf("pool at version %d while version 1's weights are missing", v)
	}
	w, err := pm1.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, rec.Object, w); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "version 1 once its weights are there", func() bool { return pool.Version() == 1 })
	for _, v := range failures() {
		if v != 1 {
			t.Fatalf("failed loads of versions %v, want only version 1", failures())
		}
	}
}
