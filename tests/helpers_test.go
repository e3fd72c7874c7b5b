package tests

import (
	"context"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"os"
	"testing"

	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// embedded starts an in-process NATS server with JetStream in a temporary folder.
func embedded(t *testing.T) string {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.URL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(context.Background(), url, "jetrl-test", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testLog writes service logs to a file in the test's folder (kept on failure via t.Logf of its path).
func testLog(t *testing.T) zerolog.Logger {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "log-*.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// Left open: goroutines of a stopped mesh may still log a last line; the OS closes it at exit.
	log, err := logging.New("test", "info", false, f)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

var eventually = bustest.Eventually

func decode(data []byte, v any) error { return codec.Unmarshal(data, v) }
