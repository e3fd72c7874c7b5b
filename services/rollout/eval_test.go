package rollout_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/policy"
)

// firstActor always picks the first candidate.
type firstActor struct{}

func (firstActor) Act(context.Context, policy.Input, rollout.Draw) (rollout.Action, error) {
	return rollout.Action{Choice: 0, Version: 1, Policy: proto.PolicyCurrent}, nil
}

// Evaluate keeps the first failed episodes by index when asked, with the calls chosen: the same calls a
// local replay of that instance makes.
func TestEvaluateKeepsTheFirstFailures(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	const episodes, keep, seed = 12, 3, 5
	res, err := rollout.Evaluate(testCtx(t), envClient(t, m), firstActor{}, rollout.EvalConfig{Tasks: []string{alfworld.Name}, Episodes: episodes, Seed: seed, Failures: keep})
	if err != nil {
		t.Fatal(err)
	}
	r := res[alfworld.Name]
	failed := r.Episodes - int(r.Success*float64(r.Episodes)+0.5)
	if r.Episodes != episodes || failed < keep {
		t.Fatalf("result %+v: want %d episodes and at least %d failed (the first candidate rarely wins)", r, episodes, keep)
	}
	if len(r.Failures) != keep || !slices.IsSortedFunc(r.Failures, func(a, b rollout.EvalFailure) int { return a.Index - b.Index }) {
		t.Fatalf("failures %+v: want the first %d by index", r.Failures, keep)
	}
	f := alfworld.New()
	for _, fail := range r.Failures {
		if fail.Seed != rollout.EvalSeed(seed, alfworld.Name, fail.Index) {
			t.Fatalf("failure %d has seed %d", fail.Index, fail.Seed)
		}
		s, open, err := task.NewSession(f, proto.SplitHeldout, fail.Seed)
		if err != nil {
			t.Fatal(err)
		}
		if open.Instruction != fail.Instruction {
			t.Fatalf("failure %d: instruction %q, want %q", fail.Index, fail.Instruction, open.Instruction)
		}
		var calls []string
		adm := open.Admissible
		for len(adm) > 0 {
			calls = append(calls, adm[0].Text())
			res, err := s.Step(adm[0])
			if err != nil {
				t.Fatal(err)
			}
			if res.Done {
				break
			}
			adm = res.Admissible
		}
		if !slices.Equal(calls, fail.Calls) {
			t.Fatalf("failure %d: calls %v, a local replay chose %v", fail.Index, fail.Calls, calls)
		}
	}

	res, err = rollout.Evaluate(testCtx(t), envClient(t, m), firstActor{}, rollout.EvalConfig{Tasks: []string{alfworld.Name}, Episodes: 4, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[alfworld.Name].Failures; got != nil {
		t.Fatalf("failures %+v kept without asking", got)
	}
}

// An evaluation none of whose episodes could be played (no env host answers) fails, instead of reporting a
// success rate of 0% over no episode.
func TestEvaluateWithoutEpisodesFails(t *testing.T) {
	m := newMesh(t) // no env host
	_, err := rollout.Evaluate(testCtx(t), envClient(t, m), firstActor{}, rollout.EvalConfig{Tasks: []string{alfworld.Name}, Episodes: 2, Seed: 1})
	if !errors.Is(err, proto.ErrEnvUnavailable) || !strings.Contains(err.Error(), "none of its 2 episodes") {
		t.Fatalf("Evaluate without env hosts: %v, want ErrEnvUnavailable naming the episodes", err)
	}
}

// A task named twice is evaluated once: its episodes, success and mean reward are those of naming it once.
func TestEvaluateCountsATaskNamedTwiceOnce(t *testing.T) {
	m := newMesh(t)
	m.startHost(t)
	cfg := rollout.EvalConfig{Tasks: []string{alfworld.Name}, Episodes: 6, Seed: 3}
	once, err := rollout.Evaluate(testCtx(t), envClient(t, m), firstActor{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tasks = []string{alfworld.Name, alfworld.Name}
	twice, err := rollout.Evaluate(testCtx(t), envClient(t, m), firstActor{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(twice) != 1 || twice[alfworld.Name].Episodes != 6 || !reflect.DeepEqual(once, twice) {
		t.Fatalf("named twice %+v, once %+v; want the same 6 episodes", twice, once)
	}
}
