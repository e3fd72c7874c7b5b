package trainer

import (
	"math"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

// The trap bonus goes to the answer turn of the episodes of groups with no success, in a task that won
// at least half of its usable episodes in the batch; infrastructure failures neither count nor get it,
// and an episode that ran out of turns has no answer turn.
func TestEntropyCoefsOfTrappedGroups(t *testing.T) {
	ep := func(task, group string, reward float64, infra bool) proto.TrainEpisode {
		return proto.TrainEpisode{Episode: proto.Episode{Task: task, GroupID: group, Status: proto.StatusCompleted, Reward: reward, InfraFailure: infra,
			Turns: make([]proto.Turn, 3)}}
	}
	limit := ep("a", "g1", -0.2, false)
	limit.Episode.Status = proto.StatusTurnLimit
	eps := []proto.TrainEpisode{
		ep("a", "g1", 0, false), ep("a", "g1", 0, false), ep("a", "g1", 1, true), limit, // all failed (the win is masked)
		ep("a", "g2", 1, false), ep("a", "g2", 0, false), // one won
		ep("a", "g3", 1, false), ep("a", "g3", 1, false), ep("a", "g3", 1, false), // task a: 4 of 8 won
		ep("b", "h1", 0, false), ep("b", "h1", 0, false), // all failed, but task b won 1 of 4
		ep("b", "h2", 1, false), ep("b", "h2", 0, false),
	}
	base, trap := 0.01, 0.1
	o := Objective{EntropyCoef: base, TrapEntropyCoef: trap}
	want := []bool{true, true, false, false, false, false, false, false, false, false, false, false, false}
	got := o.trapped(eps)
	if !slices.Equal(got, want) {
		t.Fatalf("trapped %v, want %v", got, want)
	}
	for t0, w := range []float64{base, base, base + trap} {
		if c := o.entropyCoef(got[0], t0, 3); c != w {
			t.Fatalf("trapped episode turn %d: coefficient %v, want %v", t0, c, w)
		}
		if c := o.entropyCoef(got[4], t0, 3); c != base {
			t.Fatalf("won episode turn %d: coefficient %v, want %v", t0, c, base)
		}
	}
	o.TrapEntropyCoef = 0
	if got := o.trapped(eps); slices.Contains(got, true) {
		t.Fatalf("trapped %v without the trap bonus", got)
	}
	for _, bad := range []Objective{{Clip: 0.2, TrapEntropyCoef: -0.1}, {Clip: 0.2, EntropyCoef: math.NaN()}} {
		if err := bad.Validate(); err == nil {
			t.Fatalf("%+v validated", bad)
		}
	}
}
