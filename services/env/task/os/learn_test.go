package os_test

import (
	"os"
	"strings"
	"testing"

	ostask "github.com/jetrl/jetrl/services/env/task/os"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// questionKinds name the question kinds by the start of their instructions.
var questionKinds = []string{"How many lines", "What is the value", "What is the size", "How many files", "Which user"}

// TestLearnable: the built-in policy learns os to at least 80%; it also reports success per question kind
// and, with JETRL_LEARN_DUMP set, a few failed episodes.
func TestLearnable(t *testing.T) {
	tasktest.Learn(t, ostask.New(), tasktest.LearnOptions{Report: func(t *testing.T, eps []tasktest.Played) {
		wins, counts := map[string]float64{}, map[string]float64{}
		shown := 0
		for _, e := range eps {
			for _, k := range questionKinds {
				if strings.HasPrefix(e.Instruction, k) {
					wins[k] += e.Reward
					counts[k]++
				}
			}
			if e.Reward < 1 && shown < 12 && os.Getenv("JETRL_LEARN_DUMP") != "" {
				shown++
				t.Logf("FAILED %s", e.Instruction)
				for k, in := range e.Inputs {
					t.Logf("   obs %q -> %s", in.Observation, in.Candidates[e.Choices[k]])
				}
			}
		}
		for _, k := range questionKinds {
			if counts[k] > 0 {
				t.Logf("  %-18q %.3f", k+"...", wins[k]/counts[k])
			}
		}
	}})
}
