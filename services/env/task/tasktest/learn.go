package tasktest

import (
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/shared/policy"
)

// Played is one episode as the built-in policy saw it.
type Played struct {
	Instruction string
	Inputs      []policy.Input
	Choices     []int
	Reward      float64
}

// Play runs one episode the way rollout does (candidates are call texts): greedy, or sampled when rng is set.
func Play(m *policy.Model, f task.Family, split string, seed uint64, rng *rand.Rand) Played {
	var p Played
	s, open, err := task.NewSession(f, split, seed)
	if err != nil {
		return p
	}
	p.Instruction = open.Instruction
	obs, adm := open.Observation, open.Admissible
	var history []string
	for len(adm) > 0 {
		cands := make([]string, len(adm))
		for i, c := range adm {
			cands[i] = c.Text()
		}
		in := policy.Input{Task: f.Name(), Instruction: open.Instruction, Observation: obs, History: policy.HistoryWindow(history), Candidates: cands}
		c, _ := m.Greedy(in)
		if rng != nil {
			c, _ = m.Sample(in, rng)
		}
		p.Inputs, p.Choices = append(p.Inputs, in), append(p.Choices, c)
		history = append(history, cands[c])
		r, err := s.Step(adm[c])
		if err != nil || r.Done {
			p.Reward = r.Reward
			return p
		}
		obs, adm = r.Observation, r.Admissible
	}
	return p
}

// parallel runs fn(i) for i in [0, n) on two goroutines, the two cores the built-in policy targets.
func parallel(n int, fn func(worker, i int)) {
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < n; i += 2 {
				fn(w, i)
			}
		})
	}
	wg.Wait()
}

// Heldout plays n held-out instances greedily and returns their success rate (reward 1) and the episodes.
func Heldout(m *policy.Model, f task.Family, n int) (float64, []Played) {
	eps := make([]Played, n)
	parallel(n, func(_, i int) { eps[i] = Play(m, f, proto.SplitHeldout, uint64(1_000_000+i), nil) })
	wins := 0.0
	for _, e := range eps {
		if e.Reward >= 1 {
			wins++
		}
	}
	return wins / float64(n), eps
}

// LearnOptions configure Learn.
type LearnOptions struct {
	// Budget is the training time [120s]; Target the held-out greedy success required at the end [0.8].
	Budget time.Duration
	Target float64
	// Report, if set, adds family-specific lines about the final held-out episodes (e.g. by question kind).
	Report func(t *testing.T, eps []Played)
}

// Learn trains the built-in policy on f's train split with group-normalized REINFORCE (G = 8, 32 groups per
// update, one Adam step each) and checks greedy success on held-out instances: the family's learnability
// test. It takes minutes, so it runs only with JETRL_LEARN=1 (and says so when skipped).
func Learn(t *testing.T, f task.Family, opt LearnOptions) *policy.Model {
	t.Helper()
	if os.Getenv("JETRL_LEARN") != "1" {
		t.Skipf("set JETRL_LEARN=1 to train the built-in policy on %s (about 2 minutes)", f.Name())
	}
	if opt.Budget == 0 {
		opt.Budget = 120 * time.Second
	}
	if opt.Target == 0 {
		opt.Target = 0.8
	}
	cfg := policy.Config{Seed: 1}
	cfg.SetDefaults()
	m, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	adam := policy.NewAdam(m.NumParams(), policy.AdamConfig{})
	grad := make([]float64, m.NumParams())
	const groups, size = 32, 8
	start := time.Now()
	for it := 0; time.Since(start) < opt.Budget; it++ {
		eps := make([]Played, groups*size)
		rngs := [2]*rand.Rand{rand.New(rand.NewPCG(uint64(it), 0)), rand.New(rand.NewPCG(uint64(it), 1))}
		parallel(len(eps), func(w, i int) { eps[i] = Play(m, f, proto.SplitTrain, uint64(it*groups+i/size), rngs[w]) })
		mean := 0.0
		for _, e := range eps {
			mean += e.Reward / float64(len(eps))
		}
		GroupGradient(m, eps, size, grad)
		if err := adam.Step(m.Weights, grad); err != nil {
			t.Fatal(err)
		}
		if it%10 == 0 {
			s, _ := Heldout(m, f, 200)
			t.Logf("%5.0fs iteration %d: train mean reward %.3f, held-out greedy success %.3f", time.Since(start).Seconds(), it, mean, s)
		}
	}
	s, eps := Heldout(m, f, 1000)
	t.Logf("after %v: held-out greedy success %.3f", opt.Budget, s)
	if opt.Report != nil {
		opt.Report(t, eps)
	}
	if s < opt.Target {
		t.Errorf("held-out greedy success %.3f after %v, want at least %.2f", s, opt.Budget, opt.Target)
	}
	return m
}

// GroupGradient sets grad to the gradient of group-normalized REINFORCE over eps, consecutive groups of
// size episodes of one instance each: each turn's −A·log π, A the episode's reward less its group's mean
// over the group's standard deviation, averaged over every turn of eps.
func GroupGradient(m *policy.Model, eps []Played, size int, grad []float64) {
	turns := 0
	for _, e := range eps {
		turns += len(e.Inputs)
	}
	clear(grad)
	for g := 0; g+size <= len(eps); g += size {
		grp := eps[g : g+size]
		var avg, sq float64
		for _, e := range grp {
			avg += e.Reward / float64(size)
		}
		for _, e := range grp {
			sq += (e.Reward - avg) * (e.Reward - avg) / float64(size)
		}
		for _, e := range grp {
			adv := (e.Reward - avg) / (math.Sqrt(sq) + 1e-6)
			for k, in := range e.Inputs {
				m.AccumulateGrad(in, e.Choices[k], -adv/float64(turns), grad) // descend −A·log π
			}
		}
	}
}
