package os_test

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	ostask "github.com/jetrl/jetrl/services/env/task/os"
	"github.com/jetrl/jetrl/shared/policy"
)

// played is one episode as the policy saw it.
type played struct {
	instruction string
	inputs      []policy.Input
	choices     []int
	reward      float64
}

// playPolicy runs one episode the way rollout does (candidates are call texts), sampling when rng is set.
func playPolicy(m *policy.Model, f task.Family, split string, seed uint64, rng *rand.Rand) played {
	var p played
	s, open, err := task.NewSession(f, split, seed)
	if err != nil {
		return p
	}
	p.instruction = open.Instruction
	obs, adm := open.Observation, open.Admissible
	var history []string
	for {
		cands := make([]string, len(adm))
		for i, c := range adm {
			cands[i] = c.Text()
		}
		in := policy.Input{Task: ostask.Name, Instruction: open.Instruction, Observation: obs, History: policy.HistoryWindow(history), Candidates: cands}
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
	s, _ := heldoutByKind(m, f, n)
	return s
}

// questionKinds name the question kinds by the start of their instructions.
var questionKinds = []string{"How many lines", "What is the value", "What is the size", "How many files", "Which user"}

// heldoutByKind is the held-out greedy success overall and per question kind.
func heldoutByKind(m *policy.Model, f task.Family, n int) (float64, map[string]float64) {
	eps := make([]played, n)
	parallel(n, func(_, i int) { eps[i] = playPolicy(m, f, proto.SplitHeldout, uint64(1_000_000+i), nil) })
	var sum float64
	wins, counts := map[string]float64{}, map[string]float64{}
	for _, e := range eps {
		sum += e.reward
		for _, k := range questionKinds {
			if strings.HasPrefix(e.instruction, k) {
				wins[k] += e.reward
				counts[k]++
			}
		}
	}
	for k := range counts {
		wins[k] /= counts[k]
	}
	return sum / float64(n), wins
}

// TestLearnable trains the built-in policy with group-normalized REINFORCE on train instances and checks
// greedy success on held-out ones. It takes minutes, so it runs only with JETRL_LEARN=1.
func TestLearnable(t *testing.T) {
	if os.Getenv("JETRL_LEARN") != "1" {
		t.Skip("set JETRL_LEARN=1 to train the built-in policy on os (about 2 minutes)")
	}
	f := ostask.New()
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
	if os.Getenv("JETRL_LEARN_DUMP") != "" {
		shown := 0
		for i := 0; shown < 12 && i < 400; i++ {
			e := playPolicy(m, f, proto.SplitHeldout, uint64(1_000_000+i), nil)
			if e.reward == 1 {
				continue
			}
			shown++
			t.Logf("FAILED %s", e.instruction)
			for k, in := range e.inputs {
				t.Logf("   obs %q -> %s", in.Observation, in.Candidates[e.choices[k]])
			}
		}
	}
	s, kinds := heldoutByKind(m, f, 1000)
	t.Logf("after %v: held-out greedy success %.3f", budget, s)
	for _, k := range questionKinds {
		t.Logf("  %-18q %.3f", k+"...", kinds[k])
	}
	if s < 0.8 {
		t.Errorf("held-out greedy success %.3f after %v, want at least 0.8", s, budget)
	}
}
