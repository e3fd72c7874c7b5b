package trainer

import (
	"fmt"
	"math"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/policy"
)

// Objective holds the loss's hyperparameters.
type Objective struct {
	// Clip is PPO's ε: the ratio is clipped to [1−ε, 1+ε].
	Clip float64
	// DualClip c bounds the loss of negative advantages when the ratio is large: max(min(...), c·A).
	DualClip float64
	// EntropyCoef weighs an entropy bonus (0: off).
	EntropyCoef float64
}

// TurnObjective is PPO's clipped surrogate of one turn with dual clip, and its derivative with respect to
// the new log-probability. ratio = exp(logpNew − logpOld).
func (o Objective) TurnObjective(logpNew, logpOld, adv float64) (obj, dObjdLogp float64, clipped bool) {
	ratio := math.Exp(logpNew - logpOld)
	unclipped := ratio * adv
	clippedVal := math.Max(math.Min(ratio, 1+o.Clip), 1-o.Clip) * adv
	obj = math.Min(unclipped, clippedVal)
	active := unclipped <= clippedVal // the unclipped term is the minimum: gradient flows
	if adv < 0 && o.DualClip > 1 && obj < o.DualClip*adv {
		obj, active = o.DualClip*adv, false
	}
	if active {
		return obj, ratio * adv, false
	}
	return obj, 0, true
}

// StepStats describe one update.
type StepStats struct {
	Loss         float64
	ClipFraction float64
	Turns        int
}

// accumulate adds the gradient of the token-mean loss −(1/T)·Σ obj (− entropy bonus) over the batch's turns
// into grad and returns the loss.
func (o Objective) accumulate(m *policy.Model, eps []proto.TrainEpisode, grad []float64) (StepStats, error) {
	var st StepStats
	for i := range eps {
		st.Turns += len(eps[i].Episode.Turns)
	}
	if st.Turns == 0 {
		return st, nil
	}
	scale := 1 / float64(st.Turns)
	clipped := 0
	for i := range eps {
		te := &eps[i]
		if len(te.Advantages) != len(te.Episode.Turns) {
			return st, fmt.Errorf("%w: episode %s has %d advantages for %d turns", proto.ErrMalformed, te.Episode.ID, len(te.Advantages), len(te.Episode.Turns))
		}
		inputs := policy.InputsFromEpisode(&te.Episode)
		for t, turn := range te.Episode.Turns {
			adv := te.Advantages[t]
			if math.IsNaN(adv) || math.IsInf(adv, 0) {
				return st, fmt.Errorf("%w: episode %s turn %d advantage %v", proto.ErrBadNumber, te.Episode.ID, t, adv)
			}
			logp := m.LogProb(inputs[t], turn.Chosen)
			obj, d, wasClipped := o.TurnObjective(logp, turn.LogProb, adv)
			if wasClipped {
				clipped++
			}
			st.Loss -= obj * scale
			if d != 0 {
				m.AccumulateGrad(inputs[t], turn.Chosen, -d*scale, grad)
			}
			if o.EntropyCoef > 0 {
				st.Loss -= o.EntropyCoef * scale * m.AccumulateEntropyGrad(inputs[t], -o.EntropyCoef*scale, grad)
			}
		}
	}
	st.ClipFraction = float64(clipped) / float64(st.Turns)
	return st, nil
}
