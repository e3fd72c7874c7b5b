package rollout

import (
	"context"
	"time"

	"github.com/jetrl/jetrl/shared/admission"
)

// StalenessGate admits training episodes under AReaL's bound, across every rollout replica: with batch
// size B, trainer version v and bound eta, at most (eta + v + 1)·B episodes may have started in total
// (less those refunded because they will never reach the trainer).
type StalenessGate struct {
	counter   *admission.Counter
	batchSize int64
	eta       int64
	version   func() int64
}

// NewStalenessGate returns a gate on the shared counter; version reports the trainer's current version
// (negative before the first one is known, which admits nothing).
func NewStalenessGate(counter *admission.Counter, batchSize, eta int, version func() int64) *StalenessGate {
	return &StalenessGate{counter: counter, batchSize: int64(batchSize), eta: int64(eta), version: version}
}

// Limit is the most episodes that may have started at trainer version v.
func (g *StalenessGate) Limit(v int64) int64 { return (g.eta + v + 1) * g.batchSize }

// Admit blocks until n more episodes may start, claims them, and returns the trainer version they were
// admitted under.
func (g *StalenessGate) Admit(ctx context.Context, n int64) (int64, error) {
	backoff := time.Millisecond
	for {
		if v := g.version(); v >= 0 {
			ok, err := g.counter.TryClaim(ctx, n, g.Limit(v))
			if err != nil {
				return 0, err
			}
			if ok {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}
