package replaybuffer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/rs/zerolog"
)

// A buffer whose policy version watch ends (here its bucket is deleted) stops and returns the watch's
// error instead of composing batches for a version that no longer moves.
func TestBufferStopsWhenTheVersionWatchEnds(t *testing.T) {
	m := newMesh(t)
	m.setVersion(t, 0)
	b, err := replaybuffer.New(cfg(2), replaybuffer.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	eventually(t, 10*time.Second, "the buffer to run", b.Running)
	if err := m.js.DeleteKeyValue(testCtx(t), proto.BucketPolicy); err != nil {
		t.Fatal(err)
	}
	// The watch notices the bucket is gone when its consumer misses heartbeats, some seconds on.
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "policy version watch ended") {
			t.Fatalf("Run returned %v, want the version watch's end", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("Run goes on after its version watch ended")
	}
	if b.Running() {
		t.Fatal("still running after Run returned")
	}
}
