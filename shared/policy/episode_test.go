package policy

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

func TestHistoryWindow(t *testing.T) {
	var chosen []string
	for i := range 12 {
		chosen = append(chosen, fmt.Sprint("call ", i))
	}
	for _, n := range []int{0, 1, MaxHistory, 12} {
		got := HistoryWindow(chosen[:n])
		if want := chosen[max(0, n-MaxHistory):n]; !slices.Equal(got, want) {
			t.Errorf("HistoryWindow(%d calls) = %v, want %v", n, got, want)
		}
	}
	w := HistoryWindow(chosen[:3])
	_ = append(w, "clobber")
	if chosen[3] != "call 3" {
		t.Fatal("appending to a window overwrote the caller's calls")
	}
}

func TestInputsFromEpisode(t *testing.T) {
	ep := &proto.Episode{Task: "alfworld", Instruction: "put a mug in cabinet 1"}
	for i := range 11 {
		ep.Turns = append(ep.Turns, proto.Turn{
			Observation: fmt.Sprint("obs ", i),
			Candidates:  []string{fmt.Sprint("a", i), fmt.Sprint("b", i)},
			Chosen:      i % 2,
		})
	}
	ep.Turns[4].Chosen = 7 // malformed: out of range
	inputs := InputsFromEpisode(ep)
	if len(inputs) != len(ep.Turns) {
		t.Fatalf("%d inputs for %d turns", len(inputs), len(ep.Turns))
	}
	var chosen []string
	for i, in := range inputs {
		want := Input{Task: ep.Task, Instruction: ep.Instruction, Observation: ep.Turns[i].Observation,
			History: HistoryWindow(chosen), Candidates: ep.Turns[i].Candidates}
		if in.Task != want.Task || in.Instruction != want.Instruction || in.Observation != want.Observation ||
			!slices.Equal(in.History, want.History) || !slices.Equal(in.Candidates, want.Candidates) {
			t.Errorf("turn %d: input %+v, want %+v", i, in, want)
		}
		text := ""
		if i != 4 {
			text = ep.Turns[i].Candidates[i%2]
		}
		chosen = append(chosen, text)
	}
	if got := InputsFromEpisode(&proto.Episode{}); len(got) != 0 {
		t.Fatalf("empty episode gave %d inputs", len(got))
	}
}
