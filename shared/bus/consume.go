package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ConsumeInOrder hands the consumer's messages to handle one at a time, on the caller's goroutine, until
// ctx ends (it returns nil) or handle returns an error (it returns that error). The message in hand when
// ctx ends is finished first. prefetch bounds the messages pulled ahead.
func ConsumeInOrder(ctx context.Context, cons jetstream.Consumer, prefetch int, log zerolog.Logger, handle func(jetstream.Msg) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(prefetch))
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			log.Warn().Err(err).Msg("next message")
			continue
		}
		if err := handle(m); err != nil {
			return err
		}
	}
}
