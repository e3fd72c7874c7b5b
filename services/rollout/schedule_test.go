package rollout

import (
	"math"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

func TestTaskSchedule(t *testing.T) {
	cases := []struct {
		name          string
		givenTasks    []string
		givenWeights  map[string]float64
		draws         int
		expectedCount map[string]int
	}{
		{"equal", []string{"a", "b", "c"}, nil, 9, map[string]int{"a": 3, "b": 3, "c": 3}},
		{"weighted", []string{"a", "b"}, map[string]float64{"a": 3}, 8, map[string]int{"a": 6, "b": 2}},
		{"fractional", []string{"a", "b"}, map[string]float64{"a": 0.5, "b": 1.5}, 8, map[string]int{"a": 2, "b": 6}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewTaskSchedule(c.givenTasks, c.givenWeights)
			got := map[string]int{}
			prev, run := "", 0
			for i := 0; i < c.draws; i++ {
				task := s.Next()
				got[task]++
				if task == prev {
					run++
				} else {
					prev, run = task, 1
				}
				if run > 3 {
					t.Fatalf("task %s drawn %d times in a row: not interleaved", task, run)
				}
			}
			for task, n := range c.expectedCount {
				if got[task] != n {
					t.Fatalf("counts %v, expected %v", got, c.expectedCount)
				}
			}
		})
	}
}

// An adaptive schedule moves groups towards the tasks whose groups still carry a learning signal, keeps a
// floor for the others, and multiplies the configured weights.
func TestTaskScheduleAdaptive(t *testing.T) {
	s := NewTaskSchedule([]string{"solved", "learning"}, map[string]float64{"learning": 2})
	if sh := s.Shares(); math.Abs(sh["learning"]-2.0/3) > 1e-12 {
		t.Fatalf("fixed shares %v, want learning 2/3", sh)
	}
	s.Observe("solved", false, 1) // a fixed schedule ignores outcomes
	if sh := s.Shares(); math.Abs(sh["learning"]-2.0/3) > 1e-12 {
		t.Fatalf("fixed schedule moved: %v", sh)
	}
	s.SetAdaptive(0.1)
	for range 200 {
		s.Observe("solved", false, 1)
		s.Observe("learning", true, 0.5)
		s.Observe("stuck", false, -0.2) // not a task of this schedule: ignored
	}
	// solved: 1 * max(0.1, ~0) = 0.1; learning: 2 * ~1 = 2.
	sh := s.Shares()
	if want := 0.1 / 2.1; math.Abs(sh["solved"]-want) > 1e-3 {
		t.Fatalf("shares %v, want solved at its floor share %.4f", sh, want)
	}
	counts := map[string]int{}
	for range 210 {
		counts[s.Next()]++
	}
	if counts["solved"] < 8 || counts["solved"] > 12 {
		t.Fatalf("draws %v, want about 10 of 210 for the solved task", counts)
	}
	// One informative group moves the average by 1 - signalDecay.
	s.Observe("solved", true, 1)
	s.mu.Lock()
	got := s.signal[0]
	s.mu.Unlock()
	if got < 1-signalDecay-1e-3 || got > 1-signalDecay+0.01 {
		t.Fatalf("signal after one informative group %v, want about %v", got, 1-signalDecay)
	}
}

// A group is informative when its members' outcomes differ; masked (infrastructure) episodes do not count.
func TestGroupOutcome(t *testing.T) {
	cases := []struct {
		name     string
		given    []proto.Episode
		expected float64 // signal after the group, from 1 with decay 0.95: 1 or 0.95
	}{
		{"all succeed", []proto.Episode{{Reward: 1}, {Reward: 1}, {Reward: 1}}, signalDecay},
		{"mixed", []proto.Episode{{Reward: 1}, {Reward: 0}, {Reward: 1}}, 1},
		{"turn limit against a wrong answer", []proto.Episode{{Reward: 0, Status: proto.StatusTurnLimit}, {Reward: 0, Status: proto.StatusCompleted}, {Reward: 0}}, 1},
		{"the difference is a masked episode", []proto.Episode{{Reward: 0}, {Reward: 1, InfraFailure: true}, {Reward: 0}}, signalDecay},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewTaskSchedule([]string{"x"}, nil)
			g := &groupOutcome{task: "x", left: len(c.given), schedule: s}
			for i, ep := range c.given {
				g.add(ep)
				if i < len(c.given)-1 && s.signal[0] != 1 {
					t.Fatal("schedule told before the group was complete")
				}
			}
			if math.Abs(s.signal[0]-c.expected) > 1e-12 {
				t.Fatalf("signal %v, want %v", s.signal[0], c.expected)
			}
		})
	}
}

// A family the policy has not cracked yet (every group fails alike) keeps its full weight: it is the
// shortfall from reward 1, not only differing rewards, that keeps a family in the schedule.
func TestTaskScheduleAdaptiveKeepsUnsolvedFamilies(t *testing.T) {
	s := NewTaskSchedule([]string{"solved", "stuck", "learning"}, nil)
	s.SetAdaptive(0.1)
	for range 300 {
		s.Observe("solved", false, 1)
		s.Observe("stuck", false, -0.2) // a turn-limit group: reward below 0 counts as 0
		s.Observe("learning", true, 0.9)
	}
	sh := s.Shares()
	// Multipliers: solved max(0.1, 0, 0) = 0.1; stuck max(0.1, 0, 1) = 1; learning max(0.1, 1, 0.1) = 1.
	if math.Abs(sh["solved"]-0.1/2.1) > 2e-3 || math.Abs(sh["stuck"]-1/2.1) > 2e-3 || math.Abs(sh["learning"]-1/2.1) > 2e-3 {
		t.Fatalf("shares %v, want solved %.3f and the others %.3f", sh, 0.1/2.1, 1/2.1)
	}
	s.Observe("solved", false, math.NaN()) // a NaN mean leaves the shortfall as it was
	if sh2 := s.Shares(); math.IsNaN(sh2["solved"]) {
		t.Fatalf("NaN reached the shares: %v", sh2)
	}
}
