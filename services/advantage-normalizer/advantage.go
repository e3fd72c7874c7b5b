package normalizer

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/jetrl/jetrl/proto"
)

// Epsilon keeps divisions by a zero standard deviation finite (DESIGN §1).
const Epsilon = 1e-6

// DefaultAbnormalReward is the reward of an episode the agent ended abnormally (turn limit, invalid output).
const DefaultAbnormalReward = -0.2

// ErrNonFinite is returned for NaN or infinite inputs.
var ErrNonFinite = errors.New("non-finite input")

// GroupAdvantages returns GRPO advantages A_i = (r_i − mean) / (std + ε) over one group's rewards
// (population std). A group whose rewards are all equal gets zeros: nothing in it to prefer.
func GroupAdvantages(rewards []float64) ([]float64, error) {
	if len(rewards) == 0 {
		return nil, nil
	}
	mean, std, err := meanStd(rewards)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		out[i] = (r - mean) / (std + Epsilon)
	}
	return out, nil
}

// TaskNormalize rescales action-level advantages per task: A' = (A − mean_task) / (std_task + ε), where mean
// and std run over every action-level advantage of that task in the batch (so longer episodes weigh more).
// adv[i] holds episode i's per-turn advantages and task[i] its task; adv is changed in place and the per-task
// mean and std are returned.
func TaskNormalize(task []string, adv [][]float64) (map[string][2]float64, error) {
	if len(task) != len(adv) {
		return nil, fmt.Errorf("task normalize: %d tasks for %d episodes", len(task), len(adv))
	}
	byTask := map[string][]int{}
	for i, t := range task {
		byTask[t] = append(byTask[t], i)
	}
	stats := map[string][2]float64{}
	for t, idx := range byTask {
		mean, std, n, err := meanStdOf(adv, idx)
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t, err)
		}
		if n == 0 {
			continue
		}
		for _, i := range idx {
			for k := range adv[i] {
				adv[i][k] = (adv[i][k] - mean) / (std + Epsilon)
			}
		}
		stats[t] = [2]float64{mean, std}
	}
	return stats, nil
}

// meanStdOf is meanStd over the concatenation of xs[i] for i in idx (in that order, so the sums are the
// same), without building the concatenation; n is its length.
func meanStdOf(xs [][]float64, idx []int) (mean, std float64, n int, err error) {
	for _, i := range idx {
		for _, x := range xs[i] {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return 0, 0, 0, fmt.Errorf("%w: %v", ErrNonFinite, x)
			}
			mean += x
		}
		n += len(xs[i])
	}
	if n == 0 {
		return 0, 0, 0, nil
	}
	mean /= float64(n)
	for _, i := range idx {
		for _, x := range xs[i] {
			std += (x - mean) * (x - mean)
		}
	}
	return mean, math.Sqrt(std / float64(n)), n, nil
}

func meanStd(xs []float64) (mean, std float64, err error) {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, 0, fmt.Errorf("%w: %v", ErrNonFinite, x)
		}
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs))), nil
}

// Options of Advantages.
type Options struct {
	AbnormalReward float64
	TaskNorm       bool
	// FlatGroupCoef gives a group whose shaped rewards are all equal (a flat group, zero GRPO advantage)
	// the advantage FlatGroupCoef·(r − mean_task) on each member instead, where mean_task is the mean
	// shaped reward of that task's episodes in the batch (0: off, plain GRPO). Where the group's own mean
	// says nothing, the family's mean stands in as the baseline: a question the policy fails every time
	// while it solves most of its family (every member answers one step early, say) is pushed away from
	// what its members did, which GRPO alone never does, and a question it always solves is reinforced a
	// little. The baseline is picked by the group's outcome, so this is a heuristic, not an unbiased
	// estimate; the coefficient keeps it below the groups GRPO learns from.
	FlatGroupCoef float64
}

// allEqual reports whether every reward equals the first.
func allEqual(rewards []float64) bool {
	for _, r := range rewards {
		if r != rewards[0] {
			return false
		}
	}
	return true
}

// Advantages turns a batch into a train batch: the shaped reward of each episode, GRPO advantages within
// each group, broadcast to every turn, then (optionally) task normalization across the batch.
func Advantages(b *proto.Batch, opt Options) (*proto.TrainBatch, error) {
	groups := map[string][]int{}
	for i := range b.Episodes {
		ep := &b.Episodes[i]
		if err := ep.Validate(); err != nil {
			return nil, err
		}
		if ep.InfraFailure {
			return nil, fmt.Errorf("%w: batch %s holds infrastructure failure %s", proto.ErrMalformed, b.ID, ep.ID)
		}
		groups[ep.GroupID] = append(groups[ep.GroupID], i)
	}
	ids := make([]string, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	adv := make([][]float64, len(b.Episodes))
	tasks := make([]string, len(b.Episodes))
	turns := 0
	for i := range b.Episodes {
		turns += len(b.Episodes[i].Turns)
	}
	flat := make([]float64, turns) // every episode's advantages, one slice of it each
	off := make([]int, len(b.Episodes))
	for i, o := 0, 0; i < len(b.Episodes); i++ {
		off[i] = o
		o += len(b.Episodes[i].Turns)
	}
	shaped := make([]float64, len(b.Episodes))
	taskMean := map[string]float64{}
	taskN := map[string]int{}
	for i := range b.Episodes {
		ep := &b.Episodes[i]
		shaped[i] = ShapedReward(ep, opt.AbnormalReward)
		taskMean[ep.Task] += shaped[i]
		taskN[ep.Task]++
	}
	for t, c := range taskN {
		taskMean[t] /= float64(c)
	}
	for _, id := range ids {
		idx := groups[id]
		rewards := make([]float64, len(idx))
		for k, i := range idx {
			rewards[k] = shaped[i]
		}
		ga, err := GroupAdvantages(rewards)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", id, err)
		}
		if opt.FlatGroupCoef != 0 && allEqual(rewards) {
			for k, i := range idx {
				ga[k] = opt.FlatGroupCoef * (rewards[k] - taskMean[b.Episodes[i].Task])
			}
		}
		for k, i := range idx {
			tasks[i] = b.Episodes[i].Task
			n := len(b.Episodes[i].Turns)
			adv[i] = flat[off[i] : off[i]+n : off[i]+n]
			for t := range adv[i] {
				adv[i][t] = ga[k]
			}
		}
	}
	norm := map[string][2]float64{}
	if opt.TaskNorm {
		var err error
		if norm, err = TaskNormalize(tasks, adv); err != nil {
			return nil, err
		}
	}
	tb := &proto.TrainBatch{Schema: proto.SchemaVersion, ID: b.ID, TrainerVersion: b.TrainerVersion, Tasks: map[string]proto.TaskStat{},
		Episodes: make([]proto.TrainEpisode, 0, len(b.Episodes))}
	for i := range b.Episodes {
		ep := b.Episodes[i]
		tb.Episodes = append(tb.Episodes, proto.TrainEpisode{Episode: ep, Advantages: adv[i]})
		st := tb.Tasks[ep.Task]
		st.Episodes++
		if ep.Success() {
			st.Successes++
		}
		st.MeanReward += ep.Reward
		st.AdvMean, st.AdvStd = norm[ep.Task][0], norm[ep.Task][1]
		tb.Tasks[ep.Task] = st
	}
	for t, st := range tb.Tasks {
		st.MeanReward /= float64(st.Episodes)
		tb.Tasks[t] = st
	}
	return tb, nil
}

// ShapedReward is the reward the objective sees: the env's reward, or AbnormalReward when the agent ended the
// episode abnormally (turn limit, invalid output).
func ShapedReward(ep *proto.Episode, abnormal float64) float64 {
	if ep.Status == proto.StatusTurnLimit || ep.Status == proto.StatusInvalidAction {
		return abnormal
	}
	return ep.Reward
}
