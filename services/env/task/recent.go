package task

import "sync"

// Recent keeps the values of the last keys put, up to a bound, the oldest making room first. The G
// sessions of a group play one instance and start within a few turns of each other, so a family can
// keep what is costly to build for an instance (its generated state, a database image) and serve the
// group's later sessions from it. A nil *Recent keeps nothing. Safe for concurrent use.
type Recent[K comparable, V any] struct {
	mu     sync.Mutex
	limit  int
	values map[K]V
	order  []K // keys, oldest first
	hits   uint64
	misses uint64
}

// NewRecent returns a Recent that keeps at most limit values (at least one).
func NewRecent[K comparable, V any](limit int) *Recent[K, V] {
	return &Recent[K, V]{limit: max(limit, 1), values: make(map[K]V)}
}

// Get returns k's value and whether it is kept. Callers share the value: they only read it.
func (r *Recent[K, V]) Get(k K) (V, bool) {
	if r == nil {
		var zero V
		return zero, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.values[k]
	if ok {
		r.hits++
	} else {
		r.misses++
	}
	return v, ok
}

// InstanceKey names an instance, the key a family keeps what it built for one under.
type InstanceKey struct {
	Split string
	Seed  uint64
}

// Load returns k's value, building and keeping it first when it is not kept. Two sessions that miss at
// once both build; the first to put keeps its value.
func (r *Recent[K, V]) Load(k K, build func() (V, error)) (V, error) {
	if v, ok := r.Get(k); ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	r.Put(k, v)
	return v, nil
}

// Put keeps v as k's value unless k has one, evicting the oldest beyond the bound.
func (r *Recent[K, V]) Put(k K, v V) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.values[k]; ok {
		return // another session of the instance put it meanwhile
	}
	if len(r.order) >= r.limit {
		delete(r.values, r.order[0])
		r.order = r.order[1:]
	}
	r.values[k] = v
	r.order = append(r.order, k)
}

// CacheStats is what a cache holds and how its lookups went.
type CacheStats struct {
	Kept         int
	Hits, Misses uint64
}

// Caching is a Family that keeps what it built for recent instances; the env host exports its caches'
// figures as metrics, by family and cache name.
type Caching interface {
	Caches() map[string]CacheStats
}

// Stats returns the values kept and the lookups that found one and that did not.
func (r *Recent[K, V]) Stats() CacheStats {
	if r == nil {
		return CacheStats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return CacheStats{Kept: len(r.values), Hits: r.hits, Misses: r.misses}
}
