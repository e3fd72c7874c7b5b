package config

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Run returns only once the connection is closed, not while it is still draining: what the service
// published last, without waiting for an answer, has reached the server and is stored.
func TestRunClosesTheConnectionBeforeReturning(t *testing.T) {
	url, js := embedded(t)
	ctx := bustest.Ctx(t)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DRAIN_TEST", Subjects: []string{"drain.test"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var conn *nats.Conn
	err = Run("test", Common{NATS: url, LogLevel: "error", Replicas: 1}, func(_ context.Context, p Process) error {
		conn = p.Conn
		data := bytes.Repeat([]byte("x"), 1024)
		for range n {
			if err := p.Conn.Publish("drain.test", data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !conn.IsClosed() {
		t.Fatalf("connection %v when Run returned, want closed", conn.Status())
	}
	bustest.Eventually(t, 10*time.Second, "the last publishes stored", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == n
	})
}

// notifyClosed keeps the closed handler an earlier option set.
func TestNotifyClosedKeepsTheEarlierHandler(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	earlier, closed := make(chan struct{}), make(chan struct{})
	nc, err := nats.Connect(srv.URL(), nats.ClosedHandler(func(*nats.Conn) { close(earlier) }), notifyClosed(closed))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	for what, ch := range map[string]chan struct{}{"earlier handler": earlier, "notifyClosed": closed} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Errorf("%s not called after Close", what)
		}
	}
}

// A service whose main sets Common.Unbuffered runs on a connection that keeps nothing published while
// disconnected; the others keep nats.go's default.
func TestRunConnectsUnbufferedWhenTheServiceAsks(t *testing.T) {
	url, _ := embedded(t)
	for _, unbuffered := range []bool{false, true} {
		var buffered bool
		err := Run("test", Common{NATS: url, LogLevel: "error", Replicas: 1, Unbuffered: unbuffered}, func(_ context.Context, p Process) error {
			buffered = bus.Buffered(p.Conn)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if buffered == unbuffered {
			t.Fatalf("Unbuffered %v: the service's connection buffers %v", unbuffered, buffered)
		}
	}
}
