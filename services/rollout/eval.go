package rollout

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/policy"
)

// EvalResult is one task's held-out score.
type EvalResult struct {
	Success       float64 `json:"success"`
	MeanReward    float64 `json:"mean_reward"`
	Episodes      int     `json:"episodes"`
	MeanTurns     float64 `json:"mean_turns"`
	InfraFailures int     `json:"infra_failures"`
	// Failures are the first failed episodes (by index), at most EvalConfig.Failures of them.
	Failures []EvalFailure `json:"failures,omitempty"`
}

// EvalFailure is one held-out episode the policy did not win: which instance, how it ended, and the
// calls it chose.
type EvalFailure struct {
	Index       int      `json:"index"`
	Seed        uint64   `json:"seed"`
	Status      string   `json:"status"`
	Reward      float64  `json:"reward"`
	Instruction string   `json:"instruction"`
	Calls       []string `json:"calls"`
}

// EvalConfig says what to evaluate.
type EvalConfig struct {
	Tasks       []string
	Episodes    int // per task
	Seed        uint64
	Split       string // default held-out
	Concurrency int
	// Failures is how many failed episodes per task to keep in EvalResult.Failures (0: none).
	Failures int
}

// Evaluate plays Episodes instances of each task with actor through the env hosts and scores them.
// Instance seeds depend only on (Seed, task, index), so two policies evaluated with one seed meet the same
// instances. Infrastructure failures are counted apart and left out of the scores.
func Evaluate(ctx context.Context, env *envclient.Client, actor Actor, cfg EvalConfig) (map[string]EvalResult, error) {
	if cfg.Split == "" {
		cfg.Split = proto.SplitHeldout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Episodes <= 0 {
		return nil, fmt.Errorf("eval: episodes per task must be positive, got %d", cfg.Episodes)
	}
	var tasks []string // each task once
	for _, t := range cfg.Tasks {
		if !slices.Contains(tasks, t) {
			tasks = append(tasks, t)
		}
	}
	cfg.Tasks = tasks
	type job struct {
		task string
		i    int
	}
	jobs := make(chan job)
	var mu sync.Mutex
	sum := map[string]*EvalResult{}
	firstErr := map[string]error{} // the first episode error of each task
	// rewards[task][i] is episode i's reward (0 unless played to its end), summed in index order at the
	// end: a sum in the order the episodes finished would differ in its last digits from run to run.
	rewards := map[string][]float64{}
	for _, t := range cfg.Tasks {
		sum[t] = &EvalResult{}
		rewards[t] = make([]float64, cfg.Episodes)
	}
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				spec := EpisodeSpec{
					ID: fmt.Sprintf("eval-%s-%d", j.task, j.i), GroupID: "eval", GroupSize: 1,
					Task: j.task, Split: cfg.Split, Seed: EvalSeed(cfg.Seed, j.task, j.i),
				}
				ep, err := RunEpisode(ctx, env, actor, spec)
				mu.Lock()
				r := sum[j.task]
				if err != nil {
					// Not played at all: counted with the infrastructure failures, its error kept.
					r.InfraFailures++
					if firstErr[j.task] == nil {
						firstErr[j.task] = err
					}
				} else if ep.InfraFailure {
					r.InfraFailures++
				} else {
					r.Episodes++
					rewards[j.task][j.i] = ep.Reward
					r.MeanTurns += float64(len(ep.Turns))
					if ep.Success() {
						r.Success++
					} else if cfg.Failures > 0 {
						f := EvalFailure{Index: j.i, Seed: spec.Seed, Status: ep.Status, Reward: ep.Reward, Instruction: ep.Instruction}
						for _, turn := range ep.Turns {
							if turn.Chosen >= 0 && turn.Chosen < len(turn.Candidates) {
								f.Calls = append(f.Calls, turn.Candidates[turn.Chosen])
							}
						}
						r.Failures = append(r.Failures, f)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, t := range cfg.Tasks {
		for i := 0; i < cfg.Episodes; i++ {
			select {
			case jobs <- job{t, i}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string]EvalResult{}
	for _, t := range cfg.Tasks {
		if r := sum[t]; r.Episodes == 0 && cfg.Episodes > 0 {
			// A success rate of no episode would read as 0%: the evaluation failed instead.
			return nil, fmt.Errorf("%w: evaluating %s: none of its %d episodes was played to the end (%d infrastructure failures; first error: %v)",
				proto.ErrEnvUnavailable, t, cfg.Episodes, r.InfraFailures, firstErr[t])
		}
	}
	for t, r := range sum {
		for _, x := range rewards[t] {
			r.MeanReward += x
		}
		if r.Episodes > 0 {
			r.Success /= float64(r.Episodes)
			r.MeanReward /= float64(r.Episodes)
			r.MeanTurns /= float64(r.Episodes)
		}
		slices.SortFunc(r.Failures, func(a, b EvalFailure) int { return cmp.Compare(a.Index, b.Index) })
		r.Failures = slices.Clip(r.Failures[:min(len(r.Failures), cfg.Failures)])
		out[t] = *r
	}
	return out, nil
}

// EvalSeed is the instance seed of evaluation episode i of a task.
func EvalSeed(seed uint64, task string, i int) uint64 {
	return policy.HashString(fmt.Sprintf("%d/%s/%d", seed, task, i))
}
