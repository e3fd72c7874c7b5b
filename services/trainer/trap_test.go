package trainer

import (
	"math"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

// The trap bonus goes to the episodes of groups with no success, in a task that won at least half of its
// usable episodes in the batch; infrastructure failures neither count nor get it.
func TestEntropyCoefsOfTrappedGroups(t *testing.T) {
	ep := func(task, group string, reward float64, infra bool) proto.TrainEpisode {
		return proto.TrainEpisode{Episode: proto.Episode{Task: task, GroupID: group, Status: proto.StatusCompleted, Reward: reward, InfraFailure: infra}}
	}
	eps := []proto.TrainEpisode{
		ep("a", "g1", 0, false), ep("a", "g1", 0, false), ep("a", "g1", 1, true), // all failed (the win is masked)
		ep("a", "g2", 1, false), ep("a", "g2", 0, false), // one won
		ep("a", "g3", 1, false), ep("a", "g3", 1, false), // task a: 3 of 6 won
		ep("b", "h1", 0, false), ep("b", "h1", 0, false), // all failed, but task b won 1 of 4
		ep("b", "h2", 1, false), ep("b", "h2", 0, false),
	}
	base, trap := 0.01, 0.1
	o := Objective{EntropyCoef: base, TrapEntropyCoef: trap}
	b := base + trap
	want := []float64{b, b, base, base, base, base, base, base, base, base, base}
	if got := o.entropyCoefs(eps); !slices.Equal(got, want) {
		t.Fatalf("coefficients %v, want %v", got, want)
	}
	o.TrapEntropyCoef = 0
	for i, c := range o.entropyCoefs(eps) {
		if c != 0.01 {
			t.Fatalf("episode %d: coefficient %v without the trap bonus, want 0.01", i, c)
		}
	}
	for _, bad := range []Objective{{Clip: 0.2, TrapEntropyCoef: -0.1}, {Clip: 0.2, EntropyCoef: math.NaN()}} {
		if err := bad.Validate(); err == nil {
			t.Fatalf("%+v validated", bad)
		}
	}
}
