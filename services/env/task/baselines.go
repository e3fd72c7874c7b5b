package task

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jetrl/jetrl/proto"
)

// Baseline summarizes one scripted policy's episodes on a split.
type Baseline struct {
	Episodes    int
	Successes   int
	SuccessRate float64
	// MeanReward is the mean final reward (families with fractional rewards score partial success).
	MeanReward float64
	// MeanTurns is the mean number of calls per episode.
	MeanTurns float64
}

// Policy picks the next call from the latest observation's admissible calls; solve is the scripted solver.
type Policy func(admissible []proto.ToolCall, solve func() proto.ToolCall) proto.ToolCall

// SolverRate plays the scripted solver on instances seed, seed+1, ..., seed+n-1 of split.
func SolverRate(f Family, split string, n int, seed uint64) (Baseline, error) {
	return Evaluate(f, split, n, seed, func(uint64) Policy {
		return func(_ []proto.ToolCall, solve func() proto.ToolCall) proto.ToolCall { return solve() }
	})
}

// RandomRate plays a policy that picks uniformly among the admissible calls, seeded per episode.
func RandomRate(f Family, split string, n int, seed uint64) (Baseline, error) {
	return Evaluate(f, split, n, seed, func(s uint64) Policy {
		rng := rand.New(rand.NewPCG(s, 0x72616e646f6d)) // "random": its own stream, apart from the instance's
		return func(adm []proto.ToolCall, _ func() proto.ToolCall) proto.ToolCall { return adm[rng.IntN(len(adm))] }
	})
}

// errNoAdmissible reports a running episode that offers nothing to choose from.
var errNoAdmissible = errors.New("no admissible calls while the episode is running")

// Evaluate plays n episodes, instance seeds seed..seed+n-1, with a fresh policy per episode.
func Evaluate(f Family, split string, n int, seed uint64, policy func(seed uint64) Policy) (Baseline, error) {
	var b Baseline
	var reward, turns float64
	for i := range n {
		s := seed + uint64(i)
		r, t, err := Play(f, split, s, policy(s))
		if err != nil {
			return b, err
		}
		b.Episodes++
		reward += r.Reward
		turns += float64(t)
		if r.Status == proto.StatusCompleted && r.Reward >= 1 {
			b.Successes++
		}
	}
	if b.Episodes > 0 {
		b.SuccessRate = float64(b.Successes) / float64(b.Episodes)
		b.MeanReward = reward / float64(b.Episodes)
		b.MeanTurns = turns / float64(b.Episodes)
	}
	return b, nil
}

// Play runs one episode of (split, seed) under the family's turn limit and returns its last result and
// the number of calls it took.
func Play(f Family, split string, seed uint64, p Policy) (Result, int, error) {
	s, open, err := NewSession(f, split, seed)
	if err != nil {
		return Result{}, 0, err
	}
	adm := open.Admissible
	for {
		if len(adm) == 0 {
			return Result{}, s.Turn(), fmt.Errorf("%s %s seed %d turn %d: %w", f.Name(), split, seed, s.Turn(), errNoAdmissible)
		}
		r, err := s.Step(p(adm, s.Solve))
		if err != nil {
			return r, s.Turn(), err
		}
		if r.Done {
			return r, s.Turn(), nil
		}
		adm = r.Admissible
	}
}
