package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Connect dials NATS with reconnects that never give up, logging connection events. Extra options are
// applied last, such as an embedded server's InProcess.
func Connect(ctx context.Context, url, name string, log zerolog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(5 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info().Str("url", c.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", url, err)
	}
	// RetryOnFailedConnect returns before the first connect; wait for it so callers start on a live link.
	deadline := time.Now().Add(30 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			nc.Close()
			return nil, fmt.Errorf("connect %s: not connected after 30s", url)
		}
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nc, nil
}

// Unbuffered is the connect option of a service whose writes must not outlive its right to make them (the
// replay-buffer's lease): nats.go otherwise keeps what is published while the connection is down (8 MB)
// and sends it when it is back, however late that is; with this option such a publish fails at once
// (nats.ErrReconnectBufExceeded) and nothing is sent later.
func Unbuffered() nats.Option { return nats.ReconnectBufSize(-1) }

// Buffered reports whether nc keeps what is published while disconnected, to send on reconnect.
func Buffered(nc *nats.Conn) bool { return nc.Opts.ReconnectBufSize >= 0 }

// JetStream returns the JetStream context of a connection.
func JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc)
}
