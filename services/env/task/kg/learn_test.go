package kg_test

import (
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/kg"
	"github.com/jetrl/jetrl/shared/policy"
)

// played is one episode as the policy saw it.
type played struct {
	inputs  []policy.Input
	choices []int
	reward  float64
}

// playPolicy runs one episode the way rollout does (candidates are call texts), sampling when rng is set.
func playPolicy(m *policy.Model, f task.Family, split string, seed uint64, rng *rand.Rand) played {
	var p played
	s, open, err := task.NewSession(f, split, seed)
	if err != nil {
		return p
	}
	obs, adm := open.Observation, open.Admissible
	var history []string
	for {
		cands := make([]string, len(adm))
		for i, c := range adm {
			cands[i] = c.Text()
		}
		in := policy.Input{Task: kg.Name, Instruction: open.Instruction, Observation: obs, History: policy.HistoryWindow(history), Candidates: cands}
		c, _ := m.Greedy(in)
		if rng != nil {
			c, _ = m.Sample(in, rng)
		}
		p.inputs, p.choices = append(p.inputs, in), append(p.choices, c)
		history = append(history, cands[c])
		r, err := s.Step(adm[c])
		if err != nil || r.Done {
			p.reward = r.Reward
			return p
		}
		obs, adm = r.Observation, r.Admissible
	}
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

func heldoutGreedy(m *policy.Model, f task.Family, n int) float64 {
	rewards := make([]float64, n)
	parallel(n, func(_, i int) { rewards[i] = playPolicy(m, f, proto.SplitHeldout, uint64(1_000_000+i), nil).reward })
	var sum float64
	for _, r := range rewards {
		sum += r
	}
	return sum / float64(n)
}

// TestLearnable trains the built-in policy with group-normalized REINFORCE on train instances and checks
// greedy success on held-out ones. It takes minutes, so it runs only with JETRL_LEARN=1.
func TestLearnable(t *testing.T) {
	if os.Getenv("JETRL_LEARN") != "1" {
		t.Skip("set JETRL_LEARN=1 to train the built-in policy on kg (about 2 minutes)")
	}
	f := kg.New()
	cfg := policy.Config{Seed: 1}
	cfg.SetDefaults()
	m, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opt := policy.NewAdam(m.NumParams(), policy.AdamConfig{})
	grad := make([]float64, m.NumParams())
	const groups, size, budget = 32, 8, 120 * time.Second
	start := time.Now()
	for it := 0; time.Since(start) < budget; it++ {
		eps := make([]played, groups*size)
		rngs := [2]*rand.Rand{rand.New(rand.NewPCG(uint64(it), 0)), rand.New(rand.NewPCG(uint64(it), 1))}
		parallel(len(eps), func(w, i int) {
			eps[i] = playPolicy(m, f, proto.SplitTrain, uint64(it*groups+i/size), rngs[w])
		})
		turns, wins := 0, 0.0
		for _, e := range eps {
			turns += len(e.inputs)
			wins += e.reward
		}
		clear(grad)
		for g := range groups {
			grp := eps[g*size : (g+1)*size]
			var mean, sq float64
			for _, e := range grp {
				mean += e.reward / size
			}
			for _, e := range grp {
				sq += (e.reward - mean) * (e.reward - mean) / size
			}
			for _, e := range grp {
				adv := (e.reward - mean) / (math.Sqrt(sq) + 1e-6)
				for k, in := range e.inputs {
					m.AccumulateGrad(in, e.choices[k], -adv/float64(turns), grad) // descend −A·log π
				}
			}
		}
		if err := opt.Step(m.Weights, grad); err != nil {
			t.Fatal(err)
		}
		if it%20 == 0 {
			t.Logf("%5.0fs iteration %d: train sampled success %.3f, held-out greedy %.3f",
				time.Since(start).Seconds(), it, wins/float64(len(eps)), heldoutGreedy(m, f, 200))
		}
	}
	s := heldoutGreedy(m, f, 1000)
	t.Logf("after %v: held-out greedy success %.3f", budget, s)
	if s < 0.8 {
		t.Errorf("held-out greedy success %.3f after %v, want at least 0.8", s, budget)
	}
}
