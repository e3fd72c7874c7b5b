package policy

import (
	"slices"

	"github.com/jetrl/jetrl/proto"
)

// MaxHistory is how many of the latest chosen calls the policy sees.
const MaxHistory = 8

// HistoryWindow returns the part of chosen (the calls made so far, oldest first) that the policy sees:
// the last MaxHistory. Rollout (while acting) and the trainer (via InputsFromEpisode) both use it, so
// the two see the same inputs. The result shares chosen's memory but cannot grow into it.
func HistoryWindow(chosen []string) []string {
	return slices.Clip(chosen[max(0, len(chosen)-MaxHistory):])
}

// InputsFromEpisode rebuilds the Input of every turn of ep, exactly as rollout built them while acting.
// A turn whose Chosen is out of range (a malformed episode) contributes "" to later histories.
func InputsFromEpisode(ep *proto.Episode) []Input {
	chosen := make([]string, len(ep.Turns))
	inputs := make([]Input, len(ep.Turns))
	for t, turn := range ep.Turns {
		inputs[t] = Input{
			Task:        ep.Task,
			Instruction: ep.Instruction,
			Observation: turn.Observation,
			History:     HistoryWindow(chosen[:t]),
			Candidates:  turn.Candidates,
		}
		if turn.Chosen >= 0 && turn.Chosen < len(turn.Candidates) {
			chosen[t] = turn.Candidates[turn.Chosen]
		}
	}
	return inputs
}
