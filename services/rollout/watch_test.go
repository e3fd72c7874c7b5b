package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/rs/zerolog"
)

// A rollout whose policy version watch ends (here its bucket is deleted) stops admitting and returns the
// watch's error instead of playing on at a version that no longer moves.
func TestRolloutStopsWhenTheVersionWatchEnds(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	m.publishModel(t, newModel(t, 1), 0, "")
	r, err := rollout.New(rollout.Config{Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0,
		Concurrency: 8, Seed: 1, CallTimeout: 5 * time.Second, DrainTimeout: 2 * time.Second},
		rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	eventually(t, 10*time.Second, "two groups admitted at version 0", func() bool { return m.msgs(t, proto.StreamGroups) >= 2 })
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
	if r.Running() {
		t.Fatal("still running after Run returned")
	}
}
