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
	// TrapEntropyCoef adds to EntropyCoef on the answer turn of the members of a group none of whose
	// members succeeded, in a task at least TrapMinSuccess of whose episodes in the batch succeeded
	// (0: off). Such a group is a question the policy fails every time while it solves most of its family
	// (it answers one step early, say): its advantages are all zero, so without more exploration nothing
	// moves it. The answer turn is the last turn of an episode the agent ended itself (StatusCompleted):
	// the one decision every member of the group got wrong. Turns before it, and episodes that ran out of
	// turns, keep EntropyCoef.
	TrapEntropyCoef float64
	// KLCoef weighs the KL penalty to the frozen reference policy (low-variance k3 estimator; 0: off).
	KLCoef float64
	// Correction selects how stale (off-policy) turns are corrected: CorrectionNone, CorrectionDecoupled
	// or CorrectionTruncated.
	Correction string
	// ISCap truncates the behaviour importance weight under CorrectionTruncated.
	ISCap float64
}

// Off-policy corrections.
const (
	// CorrectionNone clips the ratio against the behaviour policy (plain PPO).
	CorrectionNone = "none"
	// CorrectionDecoupled is AReaL's decoupled objective: clip against the proximal policy (the trainer's
	// weights before this batch) and weight each turn by π_prox/π_behav.
	CorrectionDecoupled = "decoupled"
	// CorrectionTruncated is the decoupled objective with the weight truncated at ISCap.
	CorrectionTruncated = "truncated"
)

// TrapMinSuccess is the share of a task's episodes in a batch that must succeed before its all-failed
// groups get Objective.TrapEntropyCoef: a family still learning fails most groups for want of skill, not
// because one question traps it.
const TrapMinSuccess = 0.5

// trapped reports, for each episode, whether its answer turn gets Objective.TrapEntropyCoef.
func (o Objective) trapped(eps []proto.TrainEpisode) []bool {
	out := make([]bool, len(eps))
	if o.TrapEntropyCoef == 0 {
		return out
	}
	type count struct{ n, won int }
	tasks := map[string]*count{}
	groupWon := map[string]bool{}
	for i := range eps {
		ep := &eps[i].Episode
		if ep.InfraFailure {
			continue
		}
		c := tasks[ep.Task]
		if c == nil {
			c = &count{}
			tasks[ep.Task] = c
		}
		c.n++
		if ep.Success() {
			c.won++
			groupWon[ep.GroupID] = true
		}
	}
	for i := range eps {
		ep := &eps[i].Episode
		c := tasks[ep.Task]
		if ep.InfraFailure || ep.Status != proto.StatusCompleted || c == nil ||
			groupWon[ep.GroupID] || float64(c.won) < TrapMinSuccess*float64(c.n) {
			continue
		}
		out[i] = true
	}
	return out
}

// entropyCoef is the entropy coefficient of turn t of an episode with n turns (see TrapEntropyCoef).
func (o Objective) entropyCoef(trapped bool, t, n int) float64 {
	if trapped && t == n-1 {
		return o.EntropyCoef + o.TrapEntropyCoef
	}
	return o.EntropyCoef
}

// maxISWeight keeps an untruncated importance weight finite when the behaviour policy was far off.
const maxISWeight = 100.0

// Validate explains what is wrong with the objective.
func (o Objective) Validate() error {
	switch {
	case o.Clip <= 0 || o.Clip >= 1:
		return fmt.Errorf("trainer: clip %v must be in (0, 1)", o.Clip)
	case o.DualClip != 0 && o.DualClip <= 1:
		return fmt.Errorf("trainer: dual clip %v must be > 1 (or 0: off)", o.DualClip)
	case o.KLCoef < 0 || o.EntropyCoef < 0 || o.TrapEntropyCoef < 0 || math.IsNaN(o.KLCoef+o.EntropyCoef+o.TrapEntropyCoef):
		return fmt.Errorf("trainer: kl coef %v, entropy coef %v and trap entropy coef %v must be >= 0", o.KLCoef, o.EntropyCoef, o.TrapEntropyCoef)
	case o.Correction != "" && o.Correction != CorrectionNone && o.Correction != CorrectionDecoupled && o.Correction != CorrectionTruncated:
		return fmt.Errorf("trainer: correction %q: want %q, %q or %q", o.Correction, CorrectionNone, CorrectionDecoupled, CorrectionTruncated)
	case o.Correction == CorrectionTruncated && o.ISCap < 1:
		return fmt.Errorf("trainer: importance weight cap %v must be >= 1", o.ISCap)
	}
	return nil
}

// TurnLoss is the objective of one turn with the configured correction and KL penalty, and its derivative
// with respect to the current log-probability: logp (current), behav (the policy that acted), prox (the
// trainer's policy before this batch) and ref (the frozen reference; ignored when KLCoef is 0).
func (o Objective) TurnLoss(logp, behav, prox, ref, adv float64) (obj, dObjdLogp float64, clipped bool) {
	switch o.Correction {
	case CorrectionDecoupled, CorrectionTruncated:
		w := math.Min(math.Exp(prox-behav), maxISWeight)
		if o.Correction == CorrectionTruncated {
			w = math.Min(w, o.ISCap)
		}
		obj, dObjdLogp, clipped = o.TurnObjective(logp, prox, adv)
		obj, dObjdLogp = w*obj, w*dObjdLogp
	default:
		obj, dObjdLogp, clipped = o.TurnObjective(logp, behav, adv)
	}
	if o.KLCoef > 0 {
		// k3 = e^δ − δ − 1 with δ = ref − logp: unbiased, non-negative, low variance.
		d := ref - logp
		obj -= o.KLCoef * (math.Exp(d) - d - 1)
		dObjdLogp -= o.KLCoef * (1 - math.Exp(d))
	}
	return obj, dObjdLogp, clipped
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

// batchPasses holds what the epochs over one batch share. Each turn's features are extracted once (they
// depend on the turn, not on the weights), the frozen reference policy's log-probabilities are computed
// once, and the proximal log-probabilities of the decoupled and truncated corrections (the trainer's policy
// before this batch) are filled by the first epoch from its own forward passes (the weights have not moved
// yet, so each turn's current log-probability is its proximal one) rather than by a pass of their own; the
// later epochs read them.
type batchPasses struct {
	in     [][]*policy.Prepared
	prox   [][]float64 // nil when the objective has no correction
	ref    [][]float64 // nil without a reference or KL term
	from   []int       // the first turn that trains, by episode (nil: every turn)
	filled bool
}

// first is the first turn of episode i that trains.
func (bp *batchPasses) first(i int) int {
	if bp.from == nil {
		return 0
	}
	return bp.from[i]
}

// newPasses prepares the passes of m (the policy before this batch) over eps; ref is the frozen
// reference (nil when KLCoef is 0).
func (o Objective) newPasses(m, ref *policy.Model, eps []proto.TrainEpisode) *batchPasses {
	bp := &batchPasses{in: make([][]*policy.Prepared, len(eps))}
	withProx := o.Correction == CorrectionDecoupled || o.Correction == CorrectionTruncated
	withRef := ref != nil && o.KLCoef > 0
	if withProx {
		bp.prox = make([][]float64, len(eps))
	}
	if withRef {
		bp.ref = make([][]float64, len(eps))
	}
	for i := range eps {
		inputs := policy.InputsFromEpisode(&eps[i].Episode)
		bp.in[i] = make([]*policy.Prepared, len(inputs))
		for t, in := range inputs {
			bp.in[i][t] = m.Prepare(in)
		}
		if withProx {
			bp.prox[i] = make([]float64, len(inputs))
		}
		if withRef {
			bp.ref[i] = make([]float64, len(inputs))
			for t, in := range inputs {
				chosen := eps[i].Episode.Turns[t].Chosen
				if bp.ref[i][t] = ref.LogProbPrepared(bp.in[i][t], chosen); math.IsNaN(bp.ref[i][t]) {
					bp.ref[i][t] = ref.LogProb(in, chosen) // a reference of another shape than m
				}
			}
		}
	}
	return bp
}

// accumulate adds the gradient of the token-mean loss −(1/T)·Σ obj (− entropy bonus) over the batch's turns
// into grad and returns the loss. bp is the batch's passes (newPasses of the same eps); while its proximal
// log-probabilities are not filled yet, m must be the policy before this batch, and this pass fills them.
func (o Objective) accumulate(m *policy.Model, eps []proto.TrainEpisode, bp *batchPasses, grad []float64) (StepStats, error) {
	var st StepStats
	for i := range eps {
		st.Turns += len(eps[i].Episode.Turns) - bp.first(i)
	}
	if st.Turns == 0 {
		return st, nil
	}
	scale := 1 / float64(st.Turns)
	clipped := 0
	trapped := o.trapped(eps)
	for i := range eps {
		te := &eps[i]
		if len(te.Advantages) != len(te.Episode.Turns) {
			return st, fmt.Errorf("%w: episode %s has %d advantages for %d turns", proto.ErrMalformed, te.Episode.ID, len(te.Advantages), len(te.Episode.Turns))
		}
		for t := bp.first(i); t < len(te.Episode.Turns); t++ {
			turn := &te.Episode.Turns[t]
			coef := o.entropyCoef(trapped[i], t, len(te.Episode.Turns))
			adv := te.Advantages[t]
			if math.IsNaN(adv) || math.IsInf(adv, 0) {
				return st, fmt.Errorf("%w: episode %s turn %d advantage %v", proto.ErrBadNumber, te.Episode.ID, t, adv)
			}
			var logpRef float64
			if bp.ref != nil {
				logpRef = bp.ref[i][t]
			}
			// One pass over the turn's features: the clipped objective's derivative at the current
			// log-probability, plus the entropy bonus.
			var obj float64
			var wasClipped bool
			logp, h := m.AccumulatePrepared(bp.in[i][t], turn.Chosen, func(logp float64) float64 {
				var px float64
				if bp.prox != nil {
					if !bp.filled {
						bp.prox[i][t] = logp
					}
					px = bp.prox[i][t]
				}
				var d float64
				obj, d, wasClipped = o.TurnLoss(logp, turn.LogProb, px, logpRef, adv)
				return -d * scale
			}, -coef*scale, grad)
			if math.IsNaN(logp) {
				return st, fmt.Errorf("%w: episode %s turn %d chose %d of %d candidates", proto.ErrMalformed, te.Episode.ID, t, turn.Chosen, len(turn.Candidates))
			}
			if wasClipped {
				clipped++
			}
			st.Loss -= obj * scale
			if coef > 0 {
				st.Loss -= coef * scale * h
			}
		}
	}
	st.ClipFraction = float64(clipped) / float64(st.Turns)
	bp.filled = true
	return st, nil
}
