package replaybuffer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/service"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultLeaseTTL is how long a replay-buffer's lease (proto.KeyReplayBufferLease) may go unrenewed before
// another replay-buffer takes it over.
const DefaultLeaseTTL = 5 * time.Second

// ErrFenced says another replay-buffer took the lease over: this one stops without writing again. Two
// buffers consuming the episodes at once would split groups between them, and each would wait for the
// members the other holds.
var ErrFenced = errors.New("replay-buffer: another replay-buffer holds the lease")

// errLeaseUnconfirmed says the lease was not renewed within half its ttl: nothing is written until it is.
var errLeaseUnconfirmed = errors.New("replay-buffer lease not renewed within half its ttl")

// lease is one replay-buffer's hold on proto.KeyReplayBufferLease, whose value is the buffer's id and a
// token drawn for this run ("id/token"). The holder rewrites it every ttl/5 by compare-and-set on the
// revision it last wrote; a buffer that finds the key held waits, and takes it over (compare-and-set on
// the revision it saw) once the revision has not changed for ttl by its own clock. The holder writes
// nothing durable unless its last renewal was sent less than ttl/2 ago (hold), so by the time another
// buffer can take over, the holder has stopped writing; its next renewal then fails and it stops with
// ErrFenced. No clocks are compared between hosts: each side times revisions on its own monotonic clock.
type lease struct {
	kv    jetstream.KeyValue
	value string // id/token
	ttl   time.Duration
	rev   uint64
	// renewed is when the write of rev was sent.
	renewed time.Time
}

// leaseHolder is the id in a lease's value.
func leaseHolder(value []byte) string {
	id, _, _ := strings.Cut(string(value), "/")
	return id
}

// acquireLease returns the lease once it is this buffer's: at once when the key is free, or once its holder
// has let it lapse (a holder under the same id too: it may be a second process given that id). While it
// waits it calls standby with the holder's id ("" once it holds the lease).
func acquireLease(ctx context.Context, kv jetstream.KeyValue, id string, ttl time.Duration, log zerolog.Logger, standby func(holder string)) (*lease, error) {
	l := &lease{kv: kv, value: id + "/" + service.NewID(), ttl: ttl}
	var seenRev uint64
	var seenAt time.Time
	for {
		sent := time.Now()
		e, err := kv.Get(ctx, proto.KeyReplayBufferLease)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err := kv.Create(ctx, proto.KeyReplayBufferLease, []byte(l.value))
			if err == nil {
				l.rev, l.renewed = rev, sent
				standby("")
				return l, nil
			}
			if !admission.IsConflict(err) && ctx.Err() == nil {
				log.Warn().Err(err).Msg("replay-buffer lease: create failed; trying again")
			}
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			log.Warn().Err(err).Msg("replay-buffer lease: read failed; trying again")
		case string(e.Value()) == l.value: // this run's create, whose reply was lost
			l.rev, l.renewed = e.Revision(), sent
			standby("")
			return l, nil
		case e.Revision() == seenRev && time.Since(seenAt) >= ttl:
			rev, err := kv.Update(ctx, proto.KeyReplayBufferLease, []byte(l.value), e.Revision())
			if err == nil {
				l.rev, l.renewed = rev, sent
				log.Warn().Str("holder", leaseHolder(e.Value())).Dur("unrenewed", time.Since(seenAt)).Msg("replay-buffer lease taken over")
				standby("")
				return l, nil
			}
			if !admission.IsConflict(err) && ctx.Err() == nil {
				log.Warn().Err(err).Msg("replay-buffer lease: take-over failed; trying again")
			}
		case e.Revision() != seenRev:
			if seenRev == 0 {
				log.Info().Str("holder", leaseHolder(e.Value())).Dur("ttl", ttl).Msg("another replay-buffer holds the lease: standing by until it lapses")
			}
			seenRev, seenAt = e.Revision(), time.Now()
			standby(leaseHolder(e.Value()))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(ttl / 5):
		}
	}
}

// renew rewrites the lease on the revision this buffer last wrote: ErrFenced when another buffer wrote it
// since (took it over), any other error when the write could not be made or confirmed (the lease stands
// until ttl).
func (l *lease) renew(ctx context.Context) error {
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, l.ttl/5)
	defer cancel()
	rev, err := l.kv.Update(rctx, proto.KeyReplayBufferLease, []byte(l.value), l.rev)
	if err == nil {
		l.rev, l.renewed = rev, sent
		return nil
	}
	if !admission.IsConflict(err) {
		return fmt.Errorf("replay-buffer lease not renewed: %w", err)
	}
	// A renewal whose reply was lost (timed out here, stored by the server) moved the revision on: the key
	// then still holds this run's value, at a revision it did not see. It is adopted, and the next renewal
	// confirms it; renewed stays at the last confirmed send.
	gctx, cancel := context.WithTimeout(ctx, l.ttl/5)
	defer cancel()
	e, gerr := l.kv.Get(gctx, proto.KeyReplayBufferLease)
	switch {
	case gerr == nil && string(e.Value()) == l.value:
		l.rev = e.Revision()
		return fmt.Errorf("replay-buffer lease: a lost renewal found at revision %d: %w", l.rev, err)
	case gerr == nil:
		return fmt.Errorf("%w (held by %s; this buffer last wrote revision %d): %w", ErrFenced, leaseHolder(e.Value()), l.rev, err)
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w (deleted since this buffer wrote revision %d): %w", ErrFenced, l.rev, err)
	default:
		return fmt.Errorf("replay-buffer lease: renewal conflicted and the key could not be read: %w", gerr)
	}
}

// hold returns nil while the buffer may write: its last renewal was sent less than ttl/2 ago. It only looks
// at the time; the renewals are made every ttl/5 by the run loop.
func (l *lease) hold() error {
	if time.Since(l.renewed) < l.ttl/2 {
		return nil
	}
	return errLeaseUnconfirmed
}

// writeBy is when writes under the lease must be done: half the ttl after the last renewal was sent.
func (l *lease) writeBy() time.Time { return l.renewed.Add(l.ttl / 2) }

// lapsed reports whether the lease has gone unrenewed for its ttl: another buffer may hold it by now.
func (l *lease) lapsed() bool { return time.Since(l.renewed) >= l.ttl }

// release deletes the lease if it is still this buffer's, so that a buffer standing by takes over at once
// (nothing when another buffer holds it).
func (l *lease) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := l.kv.Delete(ctx, proto.KeyReplayBufferLease, jetstream.LastRevision(l.rev))
	if admission.IsConflict(err) {
		if e, gerr := l.kv.Get(ctx, proto.KeyReplayBufferLease); gerr == nil && string(e.Value()) == l.value {
			return l.kv.Delete(ctx, proto.KeyReplayBufferLease, jetstream.LastRevision(e.Revision())) // a lost renewal's revision
		}
		return nil // another buffer holds it
	}
	return err
}
