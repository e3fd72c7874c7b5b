package trainer

import (
	"math"
	"testing"
)

func TestTurnLoss(t *testing.T) {
	base := Objective{Clip: 0.2, DualClip: 3}
	cases := []struct {
		name                         string
		given                        Objective
		logp, behav, prox, ref, adv  float64
		expectedObj, expectedDerivat float64
	}{
		// Plain PPO ignores prox: ratio against the behaviour policy (1.1, inside the clip range).
		{"none", base, math.Log(0.55), math.Log(0.5), math.Log(0.9), 0, 2, 1.1 * 2, 1.1 * 2},
		// Decoupled: ratio against prox (1.0) times the weight prox/behav = 0.6/0.3 = 2.
		{"decoupled", Objective{Clip: 0.2, DualClip: 3, Correction: CorrectionDecoupled}, math.Log(0.6), math.Log(0.3), math.Log(0.6), 0, 1, 2, 2},
		// Truncated at 1.5: the same turn weighs 1.5.
		{"truncated", Objective{Clip: 0.2, DualClip: 3, Correction: CorrectionTruncated, ISCap: 1.5}, math.Log(0.6), math.Log(0.3), math.Log(0.6), 0, 1, 1.5, 1.5},
		// Decoupled and clipped against prox: ratio 0.9/0.6 = 1.5 > 1.2 with A > 0: objective 1.2·A·w, no gradient.
		{"decoupled clipped", Objective{Clip: 0.2, Correction: CorrectionDecoupled}, math.Log(0.9), math.Log(0.6), math.Log(0.6), 0, 1, 1.2, 0},
		// KL at logp == ref is zero with zero gradient.
		{"kl at reference", Objective{Clip: 0.2, KLCoef: 0.5}, math.Log(0.5), math.Log(0.5), math.Log(0.5), math.Log(0.5), 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj, d, _ := c.given.TurnLoss(c.logp, c.behav, c.prox, c.ref, c.adv)
			if math.Abs(obj-c.expectedObj) > 1e-9 || math.Abs(d-c.expectedDerivat) > 1e-9 {
				t.Fatalf("TurnLoss = (%v, %v), expected (%v, %v)", obj, d, c.expectedObj, c.expectedDerivat)
			}
		})
	}
}

// The KL term's derivative matches a finite difference of the objective.
func TestTurnLossKLGradient(t *testing.T) {
	o := Objective{Clip: 0.2, DualClip: 3, KLCoef: 0.3}
	ref, behav, adv := math.Log(0.4), math.Log(0.5), 0.7
	for _, logp := range []float64{math.Log(0.45), math.Log(0.5), math.Log(0.52)} {
		_, d, _ := o.TurnLoss(logp, behav, behav, ref, adv)
		const h = 1e-6
		up, _, _ := o.TurnLoss(logp+h, behav, behav, ref, adv)
		down, _, _ := o.TurnLoss(logp-h, behav, behav, ref, adv)
		if fd := (up - down) / (2 * h); math.Abs(fd-d) > 1e-5 {
			t.Fatalf("logp %v: derivative %v, finite difference %v", logp, d, fd)
		}
		if obj, _, _ := (Objective{Clip: 0.2, KLCoef: 0.3}).TurnLoss(logp, behav, behav, ref, 0); obj > 0 {
			t.Fatalf("KL penalty must not raise the objective: %v", obj)
		}
	}
}

func TestObjectiveValidate(t *testing.T) {
	cases := []struct {
		name  string
		given Objective
		ok    bool
	}{
		{"default", DefaultConfig().Loss, true},
		{"clip zero", Objective{Clip: 0}, false},
		{"dual clip one", Objective{Clip: 0.2, DualClip: 1}, false},
		{"unknown correction", Objective{Clip: 0.2, Correction: "magic"}, false},
		{"truncated without cap", Objective{Clip: 0.2, Correction: CorrectionTruncated}, false},
		{"negative kl", Objective{Clip: 0.2, KLCoef: -1}, false},
	}
	for _, c := range cases {
		if err := c.given.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, expected ok=%v", c.name, err, c.ok)
		}
	}
}
