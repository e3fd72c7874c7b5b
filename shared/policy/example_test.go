package policy_test

import (
	"fmt"
	"math"

	"github.com/jetrl/jetrl/shared/policy"
)

// A trainer's step: score a turn, accumulate the policy gradient, let Adam descend the loss.
func Example() {
	cfg := policy.Config{Seed: 1}
	cfg.SetDefaults()
	cfg.InitScale = 0 // all-zero start: the uniform policy
	m, err := policy.New(cfg)
	if err != nil {
		panic(err)
	}
	in := policy.Input{
		Task:        "doors",
		Instruction: "Open the red door.",
		Observation: "You see a red door and a blue door.",
		Candidates:  []string{"open red door", "open blue door"},
	}
	fmt.Printf("before: π(open red door) = %.2f\n", math.Exp(m.LogProb(in, 0)))

	opt := policy.NewAdam(m.NumParams(), policy.AdamConfig{})
	grad := make([]float64, m.NumParams())
	for range 20 {
		clear(grad)
		m.AccumulateGrad(in, 0, -1, grad) // loss = −log π(open red door)
		if err := opt.Step(m.Weights, grad); err != nil {
			panic(err)
		}
	}
	choice, _ := m.Greedy(in)
	fmt.Printf("after: greedy %q, π = %.3f\n", in.Candidates[choice], math.Exp(m.LogProb(in, choice)))
	// Output:
	// before: π(open red door) = 0.50
	// after: greedy "open red door", π = 0.995
}
