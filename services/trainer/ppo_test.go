package trainer

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/policy"
)

func TestTurnObjective(t *testing.T) {
	paper := Objective{Clip: 0.2, DualClip: 3}
	tests := []struct {
		name            string
		givenObjective  Objective
		givenRatio      float64
		givenAdv        float64
		expectedObj     float64
		expectedGrad    float64 // d obj / d logpNew
		expectedClipped bool
	}{
		{name: "on-policy, positive advantage", givenObjective: paper, givenRatio: 1, givenAdv: 1, expectedObj: 1, expectedGrad: 1},
		{name: "on-policy, negative advantage", givenObjective: paper, givenRatio: 1, givenAdv: -1, expectedObj: -1, expectedGrad: -1},
		{name: "adv>0, ratio inside the clip range", givenObjective: paper, givenRatio: 1.1, givenAdv: 2, expectedObj: 2.2, expectedGrad: 2.2},
		{name: "adv>0, ratio above the clip range: clipped, no gradient", givenObjective: paper, givenRatio: 1.5, givenAdv: 1, expectedObj: 1.2, expectedGrad: 0, expectedClipped: true},
		{name: "adv>0, ratio below the clip range: the unclipped term is the minimum", givenObjective: paper, givenRatio: 0.5, givenAdv: 1, expectedObj: 0.5, expectedGrad: 0.5},
		{name: "adv<0, ratio inside the clip range", givenObjective: paper, givenRatio: 0.9, givenAdv: -1, expectedObj: -0.9, expectedGrad: -0.9},
		{name: "adv<0, ratio below the clip range: clipped, no gradient", givenObjective: paper, givenRatio: 0.5, givenAdv: -1, expectedObj: -0.8, expectedGrad: 0, expectedClipped: true},
		{name: "adv<0, ratio above the clip range but under the dual clip", givenObjective: paper, givenRatio: 2.5, givenAdv: -1, expectedObj: -2.5, expectedGrad: -2.5},
		{name: "adv<0, ratio above the dual clip: obj = 3·A, no gradient", givenObjective: paper, givenRatio: 4, givenAdv: -1, expectedObj: -3, expectedGrad: 0, expectedClipped: true},
		{name: "adv<0 of -2, ratio 3.5: obj = 3·A", givenObjective: paper, givenRatio: 3.5, givenAdv: -2, expectedObj: -6, expectedGrad: 0, expectedClipped: true},
		{name: "dual clip does not touch positive advantages", givenObjective: paper, givenRatio: 4, givenAdv: 1, expectedObj: 1.2, expectedGrad: 0, expectedClipped: true},
		{name: "dual clip off", givenObjective: Objective{Clip: 0.2}, givenRatio: 4, givenAdv: -1, expectedObj: -4, expectedGrad: -4},
		{name: "zero advantage", givenObjective: paper, givenRatio: 1.7, givenAdv: 0, expectedObj: 0, expectedGrad: 0},
		{name: "wider clip", givenObjective: Objective{Clip: 0.5, DualClip: 3}, givenRatio: 1.4, givenAdv: 1, expectedObj: 1.4, expectedGrad: 1.4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logpOld := -1.3
			logpNew := logpOld + math.Log(tc.givenRatio)
			obj, grad, clipped := tc.givenObjective.TurnObjective(logpNew, logpOld, tc.givenAdv)
			if math.Abs(obj-tc.expectedObj) > 1e-9 || math.Abs(grad-tc.expectedGrad) > 1e-9 || clipped != tc.expectedClipped {
				t.Fatalf("TurnObjective(ratio %v, adv %v) = obj %v grad %v clipped %v; want %v %v %v",
					tc.givenRatio, tc.givenAdv, obj, grad, clipped, tc.expectedObj, tc.expectedGrad, tc.expectedClipped)
			}
		})
	}
}

// The derivative TurnObjective reports is the derivative of the objective it reports, wherever that is smooth.
func TestTurnObjectiveDerivative(t *testing.T) {
	o := Objective{Clip: 0.2, DualClip: 3}
	const h = 1e-6
	for _, adv := range []float64{1.5, -0.7} {
		for _, ratio := range []float64{0.5, 0.9, 1, 1.1, 1.5, 2.5, 4} {
			lp := math.Log(ratio) - 2
			_, d, _ := o.TurnObjective(lp, -2, adv)
			up, _, _ := o.TurnObjective(lp+h, -2, adv)
			down, _, _ := o.TurnObjective(lp-h, -2, adv)
			if fd := (up - down) / (2 * h); math.Abs(fd-d) > 1e-4 {
				t.Errorf("adv %v ratio %v: derivative %v, finite difference %v", adv, ratio, d, fd)
			}
		}
	}
}

// trainEpisode builds an episode whose behaviour log-probabilities are the model's own (ratio 1).
func trainEpisode(m *policy.Model, id string, chosen []int, adv float64) proto.TrainEpisode {
	ep := proto.Episode{Schema: proto.SchemaVersion, ID: id, GroupID: "g-" + id, GroupSize: 2, Task: "alfworld",
		Instruction: "Your task is to: put a apple in fridge 1.", Status: proto.StatusCompleted}
	cands := []string{"take_action go to fridge 1", "take_action go to countertop 1", "take_action look", "take_action take apple 1 from countertop 1"}
	for i, c := range chosen {
		ep.Turns = append(ep.Turns, proto.Turn{Observation: "You see a fridge 1 and a countertop " + string(rune('1'+i)),
			Candidates: slices.Clone(cands), Chosen: c, Policy: proto.PolicyCurrent})
	}
	advs := make([]float64, len(chosen))
	for i, in := range policy.InputsFromEpisode(&ep) {
		ep.Turns[i].LogProb = m.LogProb(in, ep.Turns[i].Chosen)
		advs[i] = adv
	}
	return proto.TrainEpisode{Episode: ep, Advantages: advs}
}

// accumulate's gradient is the gradient of the loss it returns: checked by central differences on the
// weights it moves most, with and without the entropy bonus.
func TestAccumulateGradientMatchesLoss(t *testing.T) {
	m := smallModel(t, 3)
	eps := []proto.TrainEpisode{
		trainEpisode(m, "a", []int{0, 3, 1}, 1.3),
		trainEpisode(m, "b", []int{2, 2}, -0.8),
	}
	for _, o := range []Objective{{Clip: 0.2, DualClip: 3}, {Clip: 0.2, DualClip: 3, EntropyCoef: 0.05}} {
		grad := make([]float64, m.NumParams())
		st, err := o.accumulate(m, eps, o.newPasses(m, nil, eps), grad)
		if err != nil {
			t.Fatal(err)
		}
		if st.Turns != 5 || st.ClipFraction != 0 {
			t.Fatalf("stats = %+v, want 5 turns, none clipped at ratio 1", st)
		}
		// At ratio 1 the surrogate is the mean advantage: loss = -(3·1.3 - 2·0.8)/5 (minus any entropy bonus).
		if o.EntropyCoef == 0 && math.Abs(st.Loss-(-(3*1.3-2*0.8)/5)) > 1e-9 {
			t.Fatalf("loss = %v, want %v", st.Loss, -(3*1.3-2*0.8)/5)
		}
		idx := make([]int, len(grad))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(math.Abs(grad[b]), math.Abs(grad[a])) })
		if grad[idx[0]] == 0 {
			t.Fatal("zero gradient")
		}
		loss := func() float64 {
			st, err := o.accumulate(m, eps, o.newPasses(m, nil, eps), make([]float64, m.NumParams()))
			if err != nil {
				t.Fatal(err)
			}
			return st.Loss
		}
		for _, k := range idx[:5] {
			const h = 1e-2
			w := m.Weights[k]
			m.Weights[k] = w + h
			up := loss()
			m.Weights[k] = w - h
			down := loss()
			m.Weights[k] = w
			fd := (up - down) / (2 * h)
			if math.Abs(fd-grad[k]) > 0.02*math.Abs(grad[k])+1e-6 {
				t.Errorf("entropy %v weight %d: gradient %v, finite difference %v", o.EntropyCoef, k, grad[k], fd)
			}
		}
	}
}

func TestAccumulateRefusesBadAdvantages(t *testing.T) {
	m := smallModel(t, 3)
	o := Objective{Clip: 0.2, DualClip: 3}
	nan := trainEpisode(m, "a", []int{0, 1}, 1)
	nan.Advantages[1] = math.NaN()
	short := trainEpisode(m, "b", []int{0, 1}, 1)
	short.Advantages = short.Advantages[:1]
	inf := trainEpisode(m, "c", []int{0}, math.Inf(-1))
	for _, tc := range []struct {
		given    proto.TrainEpisode
		expected error
	}{{nan, proto.ErrBadNumber}, {short, proto.ErrMalformed}, {inf, proto.ErrBadNumber}} {
		if _, err := o.accumulate(m, []proto.TrainEpisode{tc.given}, o.newPasses(m, nil, []proto.TrainEpisode{tc.given}), make([]float64, m.NumParams())); !errors.Is(err, tc.expected) {
			t.Errorf("episode %s: error %v, want %v", tc.given.Episode.ID, err, tc.expected)
		}
	}
}

// proxLogProbs is each turn's log-probability under m from a forward pass of its own: what the batch's
// first epoch fills the proximal log-probabilities with.
func proxLogProbs(m *policy.Model, eps []proto.TrainEpisode) [][]float64 {
	out := make([][]float64, len(eps))
	for i := range eps {
		inputs := policy.InputsFromEpisode(&eps[i].Episode)
		out[i] = make([]float64, len(inputs))
		for t, in := range inputs {
			out[i][t] = m.LogProb(in, eps[i].Episode.Turns[t].Chosen)
		}
	}
	return out
}

// The corrections' proximal policy is the trainer's before the batch: the first epoch takes it from its own
// forward passes, giving the gradient that separately computed log-probabilities give, and the second
// epoch, after the weights moved, reads what the first stored rather than the moved policy's values. No
// correction needs none.
func TestFirstEpochFillsTheProximalPolicy(t *testing.T) {
	m := smallModel(t, 5)
	behaviour := m.Clone()
	for i := range behaviour.Weights {
		behaviour.Weights[i] *= 0.5 // the episodes were played by an older policy: importance weights differ from 1
	}
	eps := []proto.TrainEpisode{trainEpisode(behaviour, "a", []int{0, 3, 1}, 1.3), trainEpisode(behaviour, "b", []int{2, 2}, -0.8)}
	if (Objective{Clip: 0.2}).newPasses(m, nil, eps).prox != nil {
		t.Fatal("no correction: proximal log-probabilities made")
	}
	for _, o := range []Objective{{Clip: 0.2, DualClip: 3, Correction: CorrectionDecoupled}, {Clip: 0.2, Correction: CorrectionTruncated, ISCap: 1.5}} {
		want := proxLogProbs(m, eps)
		given := o.newPasses(m, nil, eps)
		gotGrad, wantGrad := make([]float64, m.NumParams()), make([]float64, m.NumParams())
		gotSt, err := o.accumulate(m, eps, given, gotGrad)
		if err != nil {
			t.Fatal(err)
		}
		filled := o.newPasses(m, nil, eps)
		filled.prox, filled.filled = want, true
		wantSt, err := o.accumulate(m, eps, filled, wantGrad)
		if err != nil {
			t.Fatal(err)
		}
		if !given.filled || math.Abs(gotSt.Loss-wantSt.Loss) > 1e-12 {
			t.Fatalf("%s: filled %v, loss %v, want %v", o.Correction, given.filled, gotSt.Loss, wantSt.Loss)
		}
		for i := range want {
			for k := range want[i] {
				if math.Abs(given.prox[i][k]-want[i][k]) > 1e-12 {
					t.Fatalf("%s: episode %d turn %d proximal %v, a pass of its own gives %v", o.Correction, i, k, given.prox[i][k], want[i][k])
				}
			}
		}
		for k := range gotGrad {
			if math.Abs(gotGrad[k]-wantGrad[k]) > 1e-12 {
				t.Fatalf("%s: gradient %d = %v, want %v", o.Correction, k, gotGrad[k], wantGrad[k])
			}
		}
		// The weights move; the second epoch keeps the proximal policy of before.
		for k := range m.Weights {
			m.Weights[k] -= float32(0.5 * gotGrad[k])
		}
		if _, err := o.accumulate(m, eps, given, make([]float64, m.NumParams())); err != nil {
			t.Fatal(err)
		}
		moved := proxLogProbs(m, eps)
		if given.prox[0][0] != want[0][0] || moved[0][0] == want[0][0] {
			t.Fatalf("%s: after the weights moved, proximal %v (before %v, the moved policy %v)", o.Correction, given.prox[0][0], want[0][0], moved[0][0])
		}
	}
}

// The frozen reference's log-probabilities are taken once per batch, from the turns' prepared features, and
// the KL term of every epoch uses them.
func TestReferenceLogProbsOncePerBatch(t *testing.T) {
	m := smallModel(t, 6)
	ref := m.Clone()
	for i := range ref.Weights {
		ref.Weights[i] = -ref.Weights[i]
	}
	eps := []proto.TrainEpisode{trainEpisode(m, "a", []int{0, 3, 1}, 1.3), trainEpisode(m, "b", []int{2, 2}, -0.8)}
	if (Objective{Clip: 0.2}).newPasses(m, ref, eps).ref != nil {
		t.Fatal("no KL term: reference log-probabilities taken")
	}
	o := Objective{Clip: 0.2, KLCoef: 0.4}
	bp := o.newPasses(m, ref, eps)
	var want float64
	for i := range eps {
		inputs := policy.InputsFromEpisode(&eps[i].Episode)
		for k, in := range inputs {
			turn := eps[i].Episode.Turns[k]
			lr := ref.LogProb(in, turn.Chosen)
			if bp.ref[i][k] != lr {
				t.Fatalf("episode %d turn %d: reference %v, want %v", i, k, bp.ref[i][k], lr)
			}
			obj, _, _ := o.TurnLoss(m.LogProb(in, turn.Chosen), turn.LogProb, 0, lr, eps[i].Advantages[k])
			want -= obj / 5
		}
	}
	for i := range ref.Weights {
		ref.Weights[i] = 0 // frozen for the batch: what was taken is used
	}
	for epoch := range 2 {
		st, err := o.accumulate(m, eps, bp, make([]float64, m.NumParams()))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.Loss-want) > 1e-12 {
			t.Fatalf("epoch %d: loss %v, want %v", epoch, st.Loss, want)
		}
	}
}

// smallModel is an untrained policy of 2^10 weights.
func smallModel(t *testing.T, seed int64) *policy.Model {
	t.Helper()
	cfg := policy.Config{Bits: 10, Seed: seed}
	cfg.SetDefaults()
	m, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Turns before an episode's first trained turn (TurnStaleness) add nothing to the gradient and are not
// counted: the gradient is that of the whole batch with those turns' advantages at 0, rescaled from the
// token mean over every turn to the mean over the trained ones.
func TestAccumulateFromTrainsOnlyLaterTurns(t *testing.T) {
	m := smallModel(t, 3)
	eps := []proto.TrainEpisode{
		trainEpisode(m, "a", []int{0, 3, 1, 2}, 1.3),
		trainEpisode(m, "b", []int{2, 2}, -0.8),
	}
	o := Objective{Clip: 0.2, DualClip: 3}
	from := []int{2, 0}
	cut := make([]float64, m.NumParams())
	bp := o.newPasses(m, nil, eps)
	bp.from = from
	st, err := o.accumulate(m, eps, bp, cut)
	if err != nil {
		t.Fatal(err)
	}
	if st.Turns != 4 {
		t.Fatalf("%d turns trained, want 4 (2 of a, 2 of b)", st.Turns)
	}
	if want := -(2*1.3 - 2*0.8) / 4; math.Abs(st.Loss-want) > 1e-9 {
		t.Fatalf("loss = %v, want %v (the trained turns' mean)", st.Loss, want)
	}
	zeroed := slices.Clone(eps)
	zeroed[0].Advantages = slices.Clone(eps[0].Advantages)
	zeroed[0].Advantages[0], zeroed[0].Advantages[1] = 0, 0
	whole := make([]float64, m.NumParams())
	if _, err := o.accumulate(m, zeroed, o.newPasses(m, nil, zeroed), whole); err != nil {
		t.Fatal(err)
	}
	nonzero := 0
	for k := range cut {
		if math.Abs(cut[k]-whole[k]*6/4) > 1e-12 {
			t.Fatalf("weight %d: gradient %v from turn 2, want %v", k, cut[k], whole[k]*6/4)
		}
		if cut[k] != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("zero gradient")
	}
}
