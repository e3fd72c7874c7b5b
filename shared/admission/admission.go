// Package admission is the staleness gate's shared counter: one KV key, updated by compare-and-set by
// every rollout replica (claims) and by the replay-buffer (refunds), so no writer overshoots another.
package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go/jetstream"
)

// Counter is the admission key of one mesh.
type Counter struct {
	kv jetstream.KeyValue
	// closed is the closed mark as this counter last wrote or read it, with its revision: its writer (the
	// replay-buffer) raises it in one write while nobody else has written it.
	closed struct {
		sync.Mutex
		below int64
		rev   uint64 // 0: not known yet
	}
}

// Bind opens the admission bucket.
func Bind(ctx context.Context, js jetstream.JetStream) (*Counter, error) {
	kv, err := js.KeyValue(ctx, proto.BucketAdmission)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", proto.BucketAdmission, err)
	}
	return &Counter{kv: kv}, nil
}

// Read returns the counter and its revision (0 when nothing was admitted yet).
func (c *Counter) Read(ctx context.Context) (proto.Admission, uint64, error) {
	a := proto.Admission{Schema: proto.SchemaVersion}
	e, err := c.kv.Get(ctx, proto.KeyAdmission)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return a, 0, nil
	}
	if err != nil {
		return a, 0, fmt.Errorf("read admission: %w", err)
	}
	if err := codec.Unmarshal(e.Value(), &a); err != nil {
		return a, 0, err
	}
	return a, e.Revision(), nil
}

// ErrClaimUncertain wraps a claim's failed write that the server may nevertheless have applied (its
// reply was lost): the caller must treat the admissions as possibly taken, and have them given back.
var ErrClaimUncertain = errors.New("admission claim may have been applied")

// TryClaim claims n admissions if at most limit would then be outstanding (started − refunded).
// ok is false when the limit does not allow it; a lost race with another writer is retried here. An
// error from the write itself wraps ErrClaimUncertain.
func (c *Counter) TryClaim(ctx context.Context, n, limit int64) (ok bool, err error) {
	return c.TryClaimAs(ctx, n, limit, "", proto.AdmissionClaim{})
}

// TryClaimAs is TryClaim that also stores claim as rollout instance instance's last claim
// (proto.Admission.Claims) in the same write; with an empty instance it stores nothing.
func (c *Counter) TryClaimAs(ctx context.Context, n, limit int64, instance string, claim proto.AdmissionClaim) (ok bool, err error) {
	if instance != "" && !proto.Token(instance) {
		return false, fmt.Errorf("admission claim: instance %q is not a subject token", instance)
	}
	for {
		a, rev, err := c.Read(ctx)
		if err != nil {
			return false, err
		}
		if a.Started-a.Refunded+n > limit {
			return false, nil
		}
		a.Started += n
		if instance != "" {
			if a.Claims == nil {
				a.Claims = map[string]proto.AdmissionClaim{}
			}
			a.Claims[instance] = claim
		}
		if err := c.write(ctx, a, rev); err == nil {
			return true, nil
		} else if !isConflict(err) {
			return false, fmt.Errorf("%w: %w", ErrClaimUncertain, err)
		}
	}
}

// DropClaim removes instance's last claim (proto.Admission.Claims) if it is still *claim (whatever it is
// when claim is nil); it reports whether one was removed.
func (c *Counter) DropClaim(ctx context.Context, instance string, claim *proto.AdmissionClaim) (bool, error) {
	for {
		a, rev, err := c.Read(ctx)
		if err != nil {
			return false, err
		}
		cl, ok := a.Claims[instance]
		if !ok || claim != nil && cl != *claim {
			return false, nil
		}
		delete(a.Claims, instance)
		if err := c.write(ctx, a, rev); err == nil {
			return true, nil
		} else if !isConflict(err) {
			return false, err
		}
	}
}

// Refund gives back n admissions of episodes that will never reach the trainer.
func (c *Counter) Refund(ctx context.Context, n int64) error {
	for {
		a, rev, err := c.Read(ctx)
		if err != nil {
			return err
		}
		a.Refunded += n
		if err := c.write(ctx, a, rev); err == nil || !isConflict(err) {
			return err
		}
	}
}

// PassMovedError is RefundPass's or Fence's answer when the counter holds a later refund pass than the
// one expected, or is owned by another buffer (Taken: one that started after the caller). An older pass
// is a stale read (ErrStaleRead).
type PassMovedError struct {
	Expected, Found uint64
	Taken           bool
}

func (e *PassMovedError) Error() string {
	if e.Taken {
		return fmt.Sprintf("admission counter owned by another replay-buffer, at refund pass %d (this one expected %d)", e.Found, e.Expected)
	}
	return fmt.Sprintf("admission counter holds refund pass %d, not the expected %d", e.Found, e.Expected)
}

// RefundPass gives back n admissions as refund pass pass, provided the counter holds pass expect and is
// owned by owner (else a *PassMovedError), storing the pass in the same write: a refund whose reply was
// lost can then be told applied or not by reading the counter (Read's RefundPass), and Fence makes sure
// one that was not never lands later. Only the owner numbers passes (the replay-buffer that last started,
// FenceHeld).
func (c *Counter) RefundPass(ctx context.Context, n int64, pass, expect uint64, owner string) error {
	return c.passUpdate(ctx, expect, owner, func(a *proto.Admission) {
		a.Refunded += n
		a.RefundPass = pass
	})
}

// Fence rewrites the counter unchanged, provided it holds refund pass expect and is owned by owner (else a
// *PassMovedError): a RefundPass write made on an earlier revision, whose reply was lost, cannot land
// after it.
func (c *Counter) Fence(ctx context.Context, expect uint64, owner string) error {
	return c.passUpdate(ctx, expect, owner, func(*proto.Admission) {})
}

// ErrStaleRead says the counter kept showing a refund pass older than the one expected, over staleReads
// reads: passes only rise, so it is a lagging replica's answer, and the call may be made again later.
var ErrStaleRead = errors.New("admission counter read from a lagging replica")

// staleReads bounds how often passUpdate reads again a counter that shows an older pass than expected: a
// replicated bucket answers reads from any replica (direct get), and one may lag the last write.
const staleReads = 50

// FenceHeld makes owner the counter's refund owner, the first step of a replay-buffer that starts: the
// pass after the one held is dead (the buffer before may have numbered and recorded it, and can no longer
// apply it: its owner is not the counter's any more, and a write of it made on an earlier revision cannot
// land after this one) and becomes the pass held, so the new owner never numbers it. It returns the
// counter as written.
func (c *Counter) FenceHeld(ctx context.Context, owner string) (proto.Admission, error) {
	for {
		a, rev, err := c.Read(ctx)
		if err != nil {
			return a, err
		}
		a.RefundPass++
		a.DeadPasses = append(a.DeadPasses, a.RefundPass)
		if len(a.DeadPasses) > proto.MaxDeadPasses {
			a.DeadPasses = a.DeadPasses[len(a.DeadPasses)-proto.MaxDeadPasses:]
		}
		a.RefundOwner = owner
		if err := c.write(ctx, a, rev); err == nil {
			return a, nil
		} else if !isConflict(err) {
			return a, err
		}
	}
}

func (c *Counter) passUpdate(ctx context.Context, expect uint64, owner string, change func(*proto.Admission)) error {
	for {
		a, rev, err := c.readPass(ctx, expect)
		if err != nil {
			return err
		}
		if anew(a, owner) {
			a.RefundOwner, a.RefundPass = owner, max(a.RefundPass, expect) // a pass never goes down
		}
		if a.RefundPass < expect {
			return fmt.Errorf("%w: refund pass %d, expected %d", ErrStaleRead, a.RefundPass, expect)
		}
		if a.RefundPass != expect || a.RefundOwner != owner {
			return &PassMovedError{Expected: expect, Found: a.RefundPass, Taken: a.RefundOwner != owner}
		}
		change(&a)
		if err := c.write(ctx, a, rev); err == nil || !isConflict(err) {
			return err
		}
	}
}

// anew reports a counter that no buffer of this release owns (no owner, no dead passes) read by an owner:
// one created anew since the owner started (its bucket lost and made again), or last written by a service
// of an older release, which drops the fields it does not know. The owner adopts it at the pass it
// expects, or the one it holds if that is later (passes never go down: a buffer whose lease lapsed finds
// a later pass than it expects, and stops). A stale read of the counter before the owner's start reads
// so too, but the write made on it then fails its compare-and-set.
func anew(a proto.Admission, owner string) bool {
	return owner != "" && a.RefundOwner == "" && len(a.DeadPasses) == 0
}

// readPass reads the counter, again while it shows a pass older than atLeast (passes only rise: a lagging
// replica's answer), at most staleReads times.
func (c *Counter) readPass(ctx context.Context, atLeast uint64) (proto.Admission, uint64, error) {
	for stale := 0; ; stale++ {
		a, rev, err := c.Read(ctx)
		if err != nil || a.RefundPass >= atLeast || stale == staleReads {
			return a, rev, err
		}
		select {
		case <-ctx.Done():
			return a, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// write stores a only if the key is still at revision rev (compare-and-set).
func (c *Counter) write(ctx context.Context, a proto.Admission, rev uint64) error {
	b, err := codec.Marshal(a, 0)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = c.kv.Create(ctx, proto.KeyAdmission, b)
	} else {
		_, err = c.kv.Update(ctx, proto.KeyAdmission, b, rev)
	}
	return err
}

// IsConflict reports a lost compare-and-set on a KV key (see isConflict).
func IsConflict(err error) bool { return isConflict(err) }

// isConflict reports a lost compare-and-set: Update reports ErrKeyRevisionMismatch (codes 10071 on one
// server, 10164 on a replicated bucket), Create reports ErrKeyExists.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// Close raises the closed mark (proto.AdmissionClosed) to below: no batch can take a group admitted at a
// version under it any more. A lower or equal mark leaves it as it is; a stored value that does not
// decode is replaced; a lost race with another writer is retried.
func (c *Counter) Close(ctx context.Context, below int64) error {
	c.closed.Lock()
	defer c.closed.Unlock()
	cur, rev := c.closed.below, c.closed.rev
	if rev == 0 || cur >= below {
		// Not known yet, or to be left as it is: only what is stored can say (another writer may have
		// changed it since).
		var err error
		if cur, rev, err = c.readClosed(ctx); err != nil {
			return err
		}
	}
	for {
		if rev != 0 && cur >= below {
			c.closed.below, c.closed.rev = cur, rev
			return nil
		}
		b, err := codec.Marshal(proto.AdmissionClosed{Schema: proto.SchemaVersion, Below: below}, 0)
		if err != nil {
			return err
		}
		var wrote uint64
		if rev == 0 {
			wrote, err = c.kv.Create(ctx, proto.KeyAdmissionClosed, b)
		} else {
			wrote, err = c.kv.Update(ctx, proto.KeyAdmissionClosed, b, rev)
		}
		if err == nil {
			c.closed.below, c.closed.rev = below, wrote
			return nil
		}
		if !isConflict(err) {
			return err
		}
		// Another writer was first: read the mark and decide again.
		if cur, rev, err = c.readClosed(ctx); err != nil {
			return err
		}
	}
}

// readClosed returns the stored closed mark and its revision (0 when there is none); a value that does
// not decode reads as the lowest mark, so that any Close replaces it.
func (c *Counter) readClosed(ctx context.Context) (int64, uint64, error) {
	e, err := c.kv.Get(ctx, proto.KeyAdmissionClosed)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("read closed mark: %w", err)
	}
	var m proto.AdmissionClosed
	if err := codec.Unmarshal(e.Value(), &m); err != nil {
		return math.MinInt64, e.Revision(), nil
	}
	return m.Below, e.Revision(), nil
}

// WatchClosed calls f with the closed mark as it is now (if set) and each time it changes, until ctx
// ends. A value that does not decode is passed to bad and skipped.
func (c *Counter) WatchClosed(ctx context.Context, f func(below int64), bad func(error)) error {
	return bus.WatchKey(ctx, c.kv, proto.KeyAdmissionClosed, func(value []byte) {
		var m proto.AdmissionClosed
		if err := codec.Unmarshal(value, &m); err != nil {
			if bad != nil {
				bad(fmt.Errorf("closed mark: %w", err))
			}
			return
		}
		f(m.Below)
	})
}
