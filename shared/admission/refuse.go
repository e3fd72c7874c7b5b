package admission

import (
	"context"
	"time"

	"github.com/jetrl/jetrl/shared/bus"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// RefuseBatch dead-letters m, a batch of n episodes that stage will not pass on, for reason, and gives
// the batch's n admissions back to the gate the first time it is dead-lettered (a later delivery of the
// same message gives nothing back twice): its episodes will never train, and the gate would otherwise
// stay n short for good. The refund has 10 s, even after ctx ends (the dead letter is stored by then), and
// is not tried again: a failed write may still have been applied. It returns the admissions given back
// and the refund's error; a dead letter that could not be stored is logged, and the message comes again.
func RefuseBatch(ctx context.Context, js jetstream.JetStream, c *Counter, stage string, m jetstream.Msg, reason error, n int, log zerolog.Logger) (refunded int64, err error) {
	first, err := bus.DeadLetterFirst(ctx, js, stage, m, reason)
	if err != nil {
		log.Error().Err(err).Bool("stored", first).Msg("dead-letter or its termination failed; the batch may come again")
	}
	if !first || n == 0 {
		return 0, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.Refund(rctx, int64(n)); err != nil {
		log.Error().Err(err).Int("episodes", n).Msg("admissions of a refused batch not given back")
		return 0, err
	}
	return int64(n), nil
}
