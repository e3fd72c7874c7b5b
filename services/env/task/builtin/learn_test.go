package builtin

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
	"github.com/jetrl/jetrl/shared/policy"
)

// TestLearnAllFamilies trains one built-in policy on all five families at once, interleaved (group-normalized
// REINFORCE, tasktest.GroupGradient), and reports held-out greedy success per family: the multi-task counterpart of
// each family's learnability test. JETRL_LEARN=1 runs it; JETRL_LEARN_ITERS sets the updates [300].
func TestLearnAllFamilies(t *testing.T) {
	if os.Getenv("JETRL_LEARN") != "1" {
		t.Skip("set JETRL_LEARN=1 to train the built-in policy on all five families")
	}
	iters := 300
	if n, err := strconv.Atoi(os.Getenv("JETRL_LEARN_ITERS")); err == nil && n > 0 {
		iters = n
	}
	reg := Registry()
	var fams []task.Family
	for _, n := range reg.Names() {
		f, _ := reg.Get(n)
		fams = append(fams, f)
	}
	cfg := policy.Config{Seed: 1}
	cfg.SetDefaults()
	m, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	adam := policy.NewAdam(m.NumParams(), policy.AdamConfig{})
	grad := make([]float64, m.NumParams())
	const perFamily, size = 8, 8
	groups := perFamily * len(fams)
	start := time.Now()
	for it := 0; it < iters; it++ {
		eps := make([]tasktest.Played, groups*size)
		rng := rand.New(rand.NewPCG(uint64(it), 7))
		for i := range eps {
			g := i / size
			eps[i] = tasktest.Play(m, fams[g%len(fams)], proto.SplitTrain, uint64(it*groups+g), rng)
		}
		tasktest.GroupGradient(m, eps, size, grad)
		if err := adam.Step(m.Weights, grad); err != nil {
			t.Fatal(err)
		}
		if it%25 == 24 || it == iters-1 {
			var line []string
			for _, f := range fams {
				s, _ := tasktest.Heldout(m, f, 200)
				line = append(line, f.Name()+" "+strconv.FormatFloat(100*s, 'f', 1, 64))
			}
			t.Logf("%5.0fs update %d: %s", time.Since(start).Seconds(), it+1, strings.Join(line, ", "))
		}
	}
	osf, _ := reg.Get("os")
	_, eps := tasktest.Heldout(m, osf, 500)
	wins, counts := map[string]float64{}, map[string]float64{}
	for _, e := range eps {
		k := strings.Join(strings.Fields(e.Instruction)[:3], " ")
		wins[k] += e.Reward
		counts[k]++
	}
	for k, n := range counts {
		t.Logf("os %-22q %.3f (%v)", k, wins[k]/n, n)
	}
}
