package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrConsumerGone is what ConsumeInOrder returns when the messages stop while its context lasts.
var ErrConsumerGone = errors.New("consumer gone")

// ConsumeInOrder hands the consumer's messages to handle one at a time, on the caller's goroutine, until
// ctx ends (it returns nil) or handle returns an error (it returns that error). The message in hand when
// ctx ends is finished first. prefetch bounds the messages pulled ahead. If the messages stop while ctx
// lasts (the consumer or its stream was deleted), it returns an error: the service must not look stopped
// on purpose.
func ConsumeInOrder(ctx context.Context, cons jetstream.Consumer, prefetch int, log zerolog.Logger, handle func(jetstream.Msg) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(prefetch))
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	var last error // the error before the iterator closed, which says why
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				if last == nil {
					last = err
				}
				return fmt.Errorf("%w: the consumer's messages stopped: %w", ErrConsumerGone, last)
			}
			log.Warn().Err(err).Msg("next message")
			last = err
			continue
		}
		if err := handle(m); err != nil {
			return err
		}
	}
}
