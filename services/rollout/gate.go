package rollout

import (
	"context"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
)

// StalenessGate admits training episodes under AReaL's bound, across every rollout replica: with batch
// size B, trainer version v and bound eta, at most (eta + v + 1)·B episodes may have started in total
// (less those refunded because they will never reach the trainer). Batches hold between B and 2B
// episodes, so the trainer can consume more than v·B by version v; counting only versions, every large
// batch would take room from the gate for good. When the version record says how many admitted episodes
// the trainer has consumed (C), the bound is therefore C + (eta + 1)·B when that is larger: at most
// (eta + 1) batches' worth in flight, whatever the batch sizes were.
type StalenessGate struct {
	counter   *admission.Counter
	batchSize int64
	eta       int64
	version   func() int64
	consumed  func() int64
	changed   func() <-chan struct{}
}

// WithConsumed gives the gate the trainer's consumed-episode count of the current version
// (WeightsPool.Consumed).
func (g *StalenessGate) WithConsumed(consumed func() int64) *StalenessGate {
	g.consumed = consumed
	return g
}

// WakeOnVersion makes a waiting Admit try again as soon as changed's channel closes (WeightsPool.Changed:
// a new version raised the bound), instead of at its next poll. Polling goes on for room that refunds make.
func (g *StalenessGate) WakeOnVersion(changed func() <-chan struct{}) *StalenessGate {
	g.changed = changed
	return g
}

// NewStalenessGate returns a gate on the shared counter; version reports the trainer's current version
// (negative before the first one is known, which admits nothing).
func NewStalenessGate(counter *admission.Counter, batchSize, eta int, version func() int64) *StalenessGate {
	return &StalenessGate{counter: counter, batchSize: int64(batchSize), eta: int64(eta), version: version}
}

// Limit is the most episodes that may have started (less refunds) at trainer version v, when the
// trainer had consumed consumed admitted episodes by then.
func (g *StalenessGate) Limit(v, consumed int64) int64 {
	return max((g.eta+v+1)*g.batchSize, consumed+(g.eta+1)*g.batchSize)
}

// Admit blocks until n more episodes may start, claims them, and returns the trainer version they were
// admitted under. When the claim's write failed in a way the server may still have applied
// (admission.ErrClaimUncertain), it returns that error with the version the claim was for.
func (g *StalenessGate) Admit(ctx context.Context, n int64) (int64, error) {
	_, v, err := g.AdmitAs(ctx, n, "", proto.AdmissionClaim{})
	return v, err
}

// AdmitAs is Admit that stores claim as rollout instance instance's last claim (proto.Admission.Claims) in
// the claim's write, with the version it is for as its StartVersion and the time of the write as its
// ClaimedAt; it returns the claim as written (or tried, with ErrClaimUncertain).
func (g *StalenessGate) AdmitAs(ctx context.Context, n int64, instance string, claim proto.AdmissionClaim) (proto.AdmissionClaim, int64, error) {
	backoff := time.Millisecond
	for {
		var changed <-chan struct{} // taken before the version is read, so no change is missed
		if g.changed != nil {
			changed = g.changed()
		}
		if v := g.version(); v >= 0 {
			var consumed int64
			if g.consumed != nil {
				consumed = g.consumed()
			}
			if err := ctx.Err(); err != nil {
				return claim, 0, err
			}
			claim.StartVersion, claim.ClaimedAt = v, time.Now().UnixNano()
			ok, err := g.claim(ctx, n, g.Limit(v, consumed), instance, claim)
			if err != nil {
				return claim, v, err
			}
			if ok {
				return claim, v, nil
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return claim, 0, ctx.Err()
		case <-changed:
			t.Stop()
			backoff = time.Millisecond
			continue
		case <-t.C:
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// claimTimeout bounds a claim once it has begun.
const claimTimeout = 10 * time.Second

// claim runs the counter's compare-and-set without ctx's cancellation: a write the server applied while
// the caller was told the context ended would admit episodes that are never played, published or
// refunded, and hold their room for good. Once begun, a claim finishes (or fails on its own timeout), and
// the caller plays what it was admitted.
func (g *StalenessGate) claim(ctx context.Context, n, limit int64, instance string, claim proto.AdmissionClaim) (bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	return g.counter.TryClaimAs(cctx, n, limit, instance, claim)
}
