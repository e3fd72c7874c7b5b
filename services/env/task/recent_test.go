package task

import (
	"fmt"
	"sync"
	"testing"
)

func TestRecent(t *testing.T) {
	r := NewRecent[string, int](3)
	for i := range 5 {
		r.Put(fmt.Sprint(i), i)
	}
	r.Put("4", 40) // kept already: unchanged
	for i := range 5 {
		v, ok := r.Get(fmt.Sprint(i))
		if want := i >= 2; ok != want || (ok && v != i) {
			t.Errorf("Get(%d) = %d, %v; want %d, %v", i, v, ok, i, want)
		}
	}
	if st := r.Stats(); st.Kept != 3 || st.Hits != 3 || st.Misses != 2 {
		t.Errorf("Stats() = %d, %d, %d; want 3, 3, 2", st.Kept, st.Hits, st.Misses)
	}

	var none *Recent[string, int]
	none.Put("a", 1)
	if v, ok := none.Get("a"); ok || v != 0 {
		t.Errorf("a nil Recent returned %d, %v", v, ok)
	}

	// Concurrent use (meaningful under -race): the bound holds.
	c := NewRecent[int, int](16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c.Put(i%40, g)
				c.Get((i + g) % 40)
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Kept != 16 || st.Hits+st.Misses != 8*200 {
		t.Errorf("after concurrent use: %d kept, %d lookups; want 16, 1600", st.Kept, st.Hits+st.Misses)
	}
}

func TestRecentLoad(t *testing.T) {
	r := NewRecent[InstanceKey, int](4)
	builds := 0
	build := func() (int, error) { builds++; return 7, nil }
	k := InstanceKey{Split: "train", Seed: 3}
	for range 3 {
		if v, err := r.Load(k, build); err != nil || v != 7 {
			t.Fatalf("Load = %d, %v; want 7", v, err)
		}
	}
	if builds != 1 {
		t.Errorf("built %d times, want once", builds)
	}
	failed := InstanceKey{Split: "train", Seed: 4}
	if _, err := r.Load(failed, func() (int, error) { return 0, fmt.Errorf("no instance") }); err == nil {
		t.Error("Load kept going past a failed build")
	}
	if _, ok := r.Get(failed); ok {
		t.Error("a failed build was kept")
	}
}
