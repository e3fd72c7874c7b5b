// Package bustest holds the helpers every package's NATS tests share: polling with a deadline, a bounded
// test context, an embedded server with the mesh's topology, and running a service until the test stops it.
package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/shared/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Server starts an embedded NATS server with the mesh's streams and buckets for the test, and returns a
// connection to it (named name) and its JetStream context; both end with the test.
func Server(t *testing.T, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := bus.Connect(Ctx(t), srv.URL(), name, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureTopology(Ctx(t), js, 1); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Eventually polls cond until it holds, failing the test if it does not within the deadline.
func Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctx is a context that ends with the test, or after 30 s.
func Ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Run starts run (a service's Run) and returns stop, which cancels it and fails the test unless it
// returns nil within the deadline; stop is idempotent and also runs at cleanup.
func Run(t *testing.T, what string, within time.Duration, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run returned %v", what, err)
				}
			case <-time.After(within):
				t.Errorf("%s did not stop", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
