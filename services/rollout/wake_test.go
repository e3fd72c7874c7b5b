package rollout_test

import (
	"testing"
	"time"

	"github.com/jetrl/jetrl/services/rollout"
)

func TestWeightsPoolChangedClosesOnSet(t *testing.T) {
	pool := rollout.NewWeightsPool(0, 0, false, 1)
	ch := pool.Changed()
	if ch != pool.Changed() {
		t.Fatal("two waiters before a Set got different channels")
	}
	select {
	case <-ch:
		t.Fatal("closed before any Set")
	default:
	}
	pool.Set(newModel(t, 1), 3)
	select {
	case <-ch:
	default:
		t.Fatal("not closed by Set")
	}
	next := pool.Changed()
	select {
	case <-next:
		t.Fatal("the channel after a Set is already closed")
	default:
	}
}

// A gate that wakes on the pool's versions admits as soon as a new version raises the bound.
func TestGateWakesOnVersion(t *testing.T) {
	m := newMesh(t)
	pool := rollout.NewWeightsPool(0, 0, false, 1)
	pool.Set(newModel(t, 1), 0)
	g := rollout.NewStalenessGate(m.counter(t), 8, 0, pool.Version).WakeOnVersion(pool.Changed)
	ctx := testCtx(t)
	if v, err := g.Admit(ctx, 8); err != nil || v != 0 {
		t.Fatalf("first batch: version %d, %v", v, err)
	}
	ninth := admitAsync(ctx, g, 1)
	select {
	case v := <-ninth:
		t.Fatalf("admitted beyond the bound (version %d)", v)
	case <-time.After(200 * time.Millisecond):
	}
	pool.Set(newModel(t, 2), 1)
	select {
	case v := <-ninth:
		if v != 1 {
			t.Fatalf("admitted under version %d, want 1", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gate stayed shut after the version moved to 1")
	}
}
