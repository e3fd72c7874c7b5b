package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/policy"
)

func spec(id string, seed uint64, v int64) rollout.EpisodeSpec {
	return rollout.EpisodeSpec{ID: id + "-0", GroupID: id, GroupSize: 1, Task: alfworld.Name, Split: proto.SplitTrain,
		Seed: seed, RolloutID: "r-test", StartVersion: v}
}

func envClient(t *testing.T, m *mesh) *envclient.Client {
	return envclient.New(m.conn(t), envclient.Config{CallTimeout: 2 * time.Second, StartRetries: 1})
}

func TestRunEpisodeAgainstARealEnvHost(t *testing.T) {
	m := newMesh(t)
	h := m.startHost(t)
	pool := rollout.NewWeightsPool(25, 0, false, 3)
	pool.Set(newModel(t, 1), 7)
	env := envClient(t, m)
	for seed := uint64(1); seed <= 3; seed++ {
		_, open, err := task.NewSession(alfworld.New(), proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		ep, err := rollout.RunEpisode(testCtx(t), env, pool, spec(fmt.Sprintf("g%d", seed), seed, 6))
		if err != nil {
			t.Fatal(err)
		}
		if err := ep.Validate(); err != nil {
			t.Fatalf("episode does not validate: %v", err)
		}
		if ep.InfraFailure || ep.HostID != h.ID() || ep.Instruction != open.Instruction || ep.StartVersion != 6 || ep.RolloutID != "r-test" {
			t.Fatalf("episode header = %+v", ep)
		}
		if ep.Status != proto.StatusCompleted && ep.Status != proto.StatusTurnLimit {
			t.Fatalf("status %q, want completed or turn-limit", ep.Status)
		}
		if (ep.Status == proto.StatusCompleted) != (ep.Reward == 1) {
			t.Fatalf("status %s with reward %v", ep.Status, ep.Reward)
		}
		if n := len(ep.Turns); n < 1 || n > alfworld.MaxTurns || (ep.Status == proto.StatusTurnLimit && n != alfworld.MaxTurns) {
			t.Fatalf("%d turns with status %s", n, ep.Status)
		}
		if ep.Turns[0].Observation != open.Observation {
			t.Fatalf("first observation %q, want the opening's %q", ep.Turns[0].Observation, open.Observation)
		}
		for i, turn := range ep.Turns {
			if turn.LogProb > 0 || turn.Version != 7 || turn.Policy != proto.PolicyCurrent || len(turn.Candidates) == 0 {
				t.Fatalf("turn %d = %+v, want log-prob <= 0 by current version 7", i, turn)
			}
		}
		if ep.FinishedAt < ep.StartedAt || ep.StartedAt == 0 {
			t.Fatalf("started %d, finished %d", ep.StartedAt, ep.FinishedAt)
		}
	}
	if h.Active() != 0 {
		t.Fatalf("finished episodes left %d sessions on the host", h.Active())
	}
}

// solverActor plays the scripted solver of a local copy of the instance: it finds the solver's call among
// the candidates as text, so it checks that candidates and admissible calls line up.
type solverActor struct {
	local *task.Session
	last  string
}

func (a *solverActor) Act(_ context.Context, in policy.Input, _ rollout.Draw) (rollout.Action, error) {
	want := a.local.Solve()
	if _, err := a.local.Step(want); err != nil {
		return rollout.Action{}, err
	}
	for i, c := range in.Candidates {
		if c == want.Text() {
			return rollout.Action{Choice: i, LogProb: 0, Version: 1, Policy: proto.PolicyCurrent}, nil
		}
	}
	return rollout.Action{}, fmt.Errorf("solver's call %q is not among the candidates %v", want.Text(), in.Candidates)
}

func TestRunEpisodeWithTheSolverWins(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	local, _, err := task.NewSession(alfworld.New(), proto.SplitTrain, 21)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := rollout.RunEpisode(testCtx(t), envClient(t, m), &solverActor{local: local}, spec("g21", 21, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !ep.Success() || ep.InfraFailure || ep.Reward != 1 {
		t.Fatalf("solver episode: status %s, reward %v, failure %q", ep.Status, ep.Reward, ep.Failure)
	}
}

// stopAfter wraps an actor and calls stop before its n-th action.
type stopAfter struct {
	rollout.Actor
	n     int32
	calls atomic.Int32
	stop  func()
}

func (a *stopAfter) Act(ctx context.Context, in policy.Input, d rollout.Draw) (rollout.Action, error) {
	if a.calls.Add(1) == a.n {
		a.stop()
	}
	return a.Actor.Act(ctx, in, d)
}

func TestEnvHostGoneMidEpisodeIsAnInfraFailure(t *testing.T) {
	m := newMesh(t)
	h := m.startHost(t)
	pool := rollout.NewWeightsPool(25, 0, false, 3)
	pool.Set(newModel(t, 1), 2)
	actor := &stopAfter{Actor: pool, n: 3, stop: h.stop}
	ep, err := rollout.RunEpisode(testCtx(t), envClient(t, m), actor, spec("gone", 5, 2))
	if err != nil {
		t.Fatalf("RunEpisode returned %v; an env failure is not an error", err)
	}
	if !ep.InfraFailure || ep.Status != proto.StatusError || ep.Reward != 0 || !strings.Contains(ep.Failure, "step 2") {
		t.Fatalf("episode = status %s, infra %v, reward %v, failure %q; want an infrastructure failure at step 2", ep.Status, ep.InfraFailure, ep.Reward, ep.Failure)
	}
	// Gone (no responders) or, if the request beat the host's unsubscribe, shutting down.
	if !strings.Contains(ep.Failure, proto.ErrEnvUnavailable.Error()) && !strings.Contains(ep.Failure, proto.ErrShuttingDown.Error()) {
		t.Fatalf("failure %q does not say the host is unavailable or shutting down", ep.Failure)
	}
	if len(ep.Turns) != 3 || ep.HostID != h.ID() || ep.FinishedAt == 0 {
		t.Fatalf("episode kept %d turns on host %q, want the 3 played", len(ep.Turns), ep.HostID)
	}
}

func TestRunEpisodeFailures(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	env := envClient(t, m)
	pool := rollout.NewWeightsPool(25, 0, false, 3)
	pool.Set(newModel(t, 1), 0)
	empty := rollout.NewWeightsPool(25, 0, false, 3) // no policy loaded: Act fails
	tests := []struct {
		name            string
		givenSpec       rollout.EpisodeSpec
		givenActor      rollout.Actor
		expectedFailure string
	}{
		{"unknown task", rollout.EpisodeSpec{ID: "x-0", GroupID: "x", GroupSize: 1, Task: "chess", Split: proto.SplitTrain}, pool, "start: " + proto.ErrUnknownTask.Error()},
		{"unknown split", rollout.EpisodeSpec{ID: "x-0", GroupID: "x", GroupSize: 1, Task: alfworld.Name, Split: "dev"}, pool, "start: " + proto.ErrUnknownSplit.Error()},
		{"policy fails", spec("p", 1, 0), empty, "policy: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := rollout.RunEpisode(testCtx(t), env, tc.givenActor, tc.givenSpec)
			if err != nil {
				t.Fatalf("RunEpisode returned %v", err)
			}
			if !ep.InfraFailure || ep.Status != proto.StatusError || !strings.HasPrefix(ep.Failure, tc.expectedFailure) {
				t.Fatalf("episode = status %s infra %v failure %q; want failure starting %q", ep.Status, ep.InfraFailure, ep.Failure, tc.expectedFailure)
			}
		})
	}
}

func TestRunEpisodeStopsWhenContextEnds(t *testing.T) {
	m := newMesh(t)
	h := m.startHost(t)
	pool := rollout.NewWeightsPool(25, 0, false, 3)
	pool.Set(newModel(t, 1), 0)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	_, err := rollout.RunEpisode(ctx, envClient(t, m), &stopAfter{Actor: pool, n: 2, stop: cancel}, spec("c", 1, 0))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunEpisode = %v, want context.Canceled", err)
	}
	// The session it held is cancelled, not left to expire.
	eventually(t, 5*time.Second, "the session to be cancelled", func() bool { return h.Active() == 0 })
}

func TestRunEpisodeStopsWhenNoBatchCanTakeIt(t *testing.T) {
	m := newMesh(t)
	h := m.startHost(t)
	env := envClient(t, m)
	solver := func() *solverActor {
		local, _, err := task.NewSession(alfworld.New(), proto.SplitTrain, 21)
		if err != nil {
			t.Fatal(err)
		}
		return &solverActor{local: local}
	}
	whole, err := rollout.RunEpisode(testCtx(t), env, solver(), spec("whole", 21, 4))
	if err != nil {
		t.Fatal(err)
	}
	if !whole.Success() || len(whole.Turns) < 3 {
		t.Fatalf("the solver's episode: status %s, %d turns; the test needs a win in 3 turns or more", whole.Status, len(whole.Turns))
	}
	// The trainer passes the bound after two turns: the third is not played.
	var checks atomic.Int32
	sp := spec("stopped", 21, 4)
	sp.Expired = func() bool { return checks.Add(1) > 2 }
	ep, err := rollout.RunEpisode(testCtx(t), env, solver(), sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := ep.Validate(); err != nil {
		t.Fatalf("stopped episode does not validate: %v", err)
	}
	if ep.Status != proto.StatusStale || ep.InfraFailure || ep.Reward != 0 || len(ep.Turns) != 2 || !strings.Contains(ep.Failure, "turn 2") || ep.FinishedAt < ep.StartedAt {
		t.Fatalf("episode = status %s, infra %v, reward %v, %d turns, failure %q; want stopped stale after 2 turns", ep.Status, ep.InfraFailure, ep.Reward, len(ep.Turns), ep.Failure)
	}
	for i := range ep.Turns {
		if ep.Turns[i].Observation != whole.Turns[i].Observation {
			t.Fatalf("turn %d observed %q, want the whole episode's %q", i, ep.Turns[i].Observation, whole.Turns[i].Observation)
		}
	}
	// The stopped episode's session was cancelled, not left to the host's idle timeout.
	eventually(t, 5*time.Second, "the host to close the stopped session", func() bool { return h.Active() == 0 })
}
