package rollout

import "testing"

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
