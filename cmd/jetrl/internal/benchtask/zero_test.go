package benchtask

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

func play(t *testing.T, f task.Family, split string, seed uint64, pick func(task.Instance, task.Opening, int) proto.ToolCall) (task.Result, int) {
	t.Helper()
	s, open, err := task.NewSession(f, split, seed)
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := f.New(split, seed) // a twin of the session's instance, for the solver's answers
	for turn := 0; ; turn++ {
		call := pick(inst, open, turn)
		r, err := s.Step(call)
		if err != nil {
			t.Fatal(err)
		}
		inst.Step(call)
		if r.Done {
			return r, turn + 1
		}
		open.Admissible = r.Admissible
	}
}

func TestZero(t *testing.T) {
	f := NewZero(4)
	solver := func(inst task.Instance, _ task.Opening, _ int) proto.ToolCall { return inst.Solve() }
	wrong := func(inst task.Instance, _ task.Opening, _ int) proto.ToolCall {
		if inst.Solve() == zeroCalls[0] {
			return zeroCalls[1]
		}
		return zeroCalls[0]
	}
	differ := 0
	for seed := uint64(1); seed <= 50; seed++ {
		r, turns := play(t, f, proto.SplitTrain, seed, solver)
		if r.Reward != 1 || r.Status != proto.StatusCompleted || turns != 4 {
			t.Fatalf("seed %d: solver got %v (%s) in %d turns", seed, r.Reward, r.Status, turns)
		}
		if r, _ := play(t, f, proto.SplitTrain, seed, wrong); r.Reward != 0 {
			t.Fatalf("seed %d: always wrong got %v", seed, r.Reward)
		}
		a, _ := f.New(proto.SplitTrain, seed)
		b, _ := f.New(proto.SplitHeldout, seed)
		if a.Solve() != b.Solve() {
			differ++
		}
	}
	if differ == 0 {
		t.Error("held-out instances answer like train instances of the same seed")
	}
	if _, err := f.New("test", 1); err == nil {
		t.Error("unknown split accepted")
	}
}
