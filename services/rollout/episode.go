package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/policy"
)

// Actor picks one candidate per turn and says which policy produced the choice.
// The built-in WeightsPool is one Actor; an LLM served over an OpenAI-compatible API can be another.
type Actor interface {
	Act(ctx context.Context, in policy.Input, d Draw) (Action, error)
}

// Draw names the turn an action is for: the instance's seed, the episode's place in its group and the
// turn's number. A sampling actor draws its randomness from it (WeightsPool does), so a turn samples the
// same whenever it is played and whatever else is in play: two runs of one seed differ only where their
// policies or timing do.
type Draw struct {
	Seed   uint64
	Member int
	Turn   int
}

// Action is an actor's choice for one turn.
type Action struct {
	Choice  int
	LogProb float64
	Version int64
	Policy  string // proto.PolicyCurrent or proto.PolicyStale
}

// EpisodeSpec says which instance to play and how the episode is named.
type EpisodeSpec struct {
	ID, GroupID string
	GroupSize   int
	// Member is the episode's place in its group (0 to GroupSize-1): the group's members play one instance,
	// and each samples its own turns (Draw).
	Member       int
	Task, Split  string
	Seed         uint64
	RolloutID    string
	StartVersion int64
	// Expired, when set, reports whether no batch can take the episode any more; RunEpisode asks before
	// each turn and, when it can no longer train, stops playing it: the env session is cancelled and the
	// episode comes back with the turns played, status proto.StatusStale.
	Expired func() bool
}

// RunEpisode plays one episode to its end. It never returns a partial trajectory as the agent's:
// when the env fails (start refused, host gone, timeout) the episode comes back with InfraFailure set.
// It returns an error only when ctx ends.
func RunEpisode(ctx context.Context, env *envclient.Client, actor Actor, spec EpisodeSpec) (proto.Episode, error) {
	ep := proto.Episode{
		Schema: proto.SchemaVersion, ID: spec.ID, GroupID: spec.GroupID, GroupSize: spec.GroupSize,
		Task: spec.Task, Split: spec.Split, Seed: spec.Seed, RolloutID: spec.RolloutID,
		StartVersion: spec.StartVersion, StartedAt: time.Now().UnixNano(), Status: proto.StatusRunning,
	}
	infra := func(err error) (proto.Episode, error) {
		if ctx.Err() != nil {
			return ep, ctx.Err()
		}
		ep.InfraFailure, ep.Status, ep.Failure, ep.Reward = true, proto.StatusError, err.Error(), 0
		ep.FinishedAt = time.Now().UnixNano()
		return ep, nil
	}
	start, err := env.Start(ctx, proto.EnvStartRequest{Task: spec.Task, Split: spec.Split, Seed: spec.Seed, EpisodeID: spec.ID})
	if err != nil {
		return infra(fmt.Errorf("start: %w", err))
	}
	ep.HostID, ep.Instruction = start.HostID, start.Instruction
	obs, admissible := start.Observation, start.Admissible
	var history []string
	for turn := 0; ; turn++ {
		if len(admissible) == 0 {
			// The game offers nothing to choose from: nothing an agent did wrong, so not the agent's failure.
			_ = env.Cancel(context.WithoutCancel(ctx), start.HostID, start.SessionID)
			return infra(errors.New("env offered no admissible call"))
		}
		if spec.Expired != nil && spec.Expired() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = env.Cancel(cctx, start.HostID, start.SessionID)
			cancel()
			ep.Status, ep.Failure, ep.Reward = proto.StatusStale, fmt.Sprintf("stopped at turn %d: no batch can take it within the staleness bound", turn), 0
			ep.FinishedAt = time.Now().UnixNano()
			return ep, nil
		}
		cands := make([]string, len(admissible))
		for i, c := range admissible {
			cands[i] = c.Text()
		}
		in := policy.Input{Task: spec.Task, Instruction: ep.Instruction, Observation: obs, History: policy.HistoryWindow(history), Candidates: cands}
		act, err := actor.Act(ctx, in, Draw{Seed: spec.Seed, Member: spec.Member, Turn: turn})
		if err != nil {
			_ = env.Cancel(context.WithoutCancel(ctx), start.HostID, start.SessionID)
			return infra(fmt.Errorf("policy: %w", err))
		}
		ep.Turns = append(ep.Turns, proto.Turn{
			Observation: obs, Candidates: cands, Chosen: act.Choice, LogProb: act.LogProb,
			Version: act.Version, Policy: act.Policy,
		})
		history = append(history, cands[act.Choice])
		rep, err := env.Step(ctx, start.HostID, start.SessionID, admissible[act.Choice])
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = env.Cancel(cctx, start.HostID, start.SessionID)
			cancel()
			return infra(fmt.Errorf("step %d: %w", turn, err))
		}
		if rep.Done {
			ep.Reward, ep.Status = rep.Reward, rep.Status
			ep.FinishedAt = time.Now().UnixNano()
			return ep, nil
		}
		obs, admissible = rep.Observation, rep.Admissible
	}
}
