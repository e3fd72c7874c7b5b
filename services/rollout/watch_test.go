package rollout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/nats-io/nats.go/jetstream"
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

// A claim whose write may have landed without its reply is not left holding room in the gate for good:
// the rollout announces a group that will not play, which the replay-buffer times out and refunds, and
// stops with the claim's error.
func TestUncertainClaimIsAnnouncedForItsRefund(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	m.publishModel(t, newModel(t, 1), 0, "")
	// A bucket that refuses every value: the claim's read succeeds and its write fails.
	if err := m.js.DeleteKeyValue(testCtx(t), proto.BucketAdmission); err != nil {
		t.Fatal(err)
	}
	if _, err := m.js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: proto.BucketAdmission, MaxValueSize: 4}); err != nil {
		t.Fatal(err)
	}
	r, err := rollout.New(rollout.Config{Tasks: []string{alfworld.Name}, GroupSize: 4, BatchSize: 8, Eta: 0,
		Concurrency: 8, Seed: 1, CallTimeout: 5 * time.Second, DrainTimeout: 2 * time.Second},
		rollout.Deps{Conn: m.conn(t), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, admission.ErrClaimUncertain) {
			t.Fatalf("Run returned %v, want the uncertain claim", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run goes on after an uncertain claim")
	}
	if n := m.msgs(t, proto.StreamGroups); n != 1 {
		t.Fatalf("%d group markers, want the one announced for the uncertain claim", n)
	}
	if n := m.msgs(t, proto.StreamEpisodes); n != 0 {
		t.Fatalf("%d episodes published for a group that must not play", n)
	}
}
