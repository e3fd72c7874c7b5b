package webshop_test

import (
	"testing"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
	"github.com/jetrl/jetrl/services/env/task/webshop"
)

func TestConformance(t *testing.T) {
	tasktest.RunConformance(t, webshop.New(), tasktest.Options{
		FractionalReward:      true,
		InadmissibleMarker:    "not admissible",
		SolverCallsAdmissible: true,
		MinDistinct:           1900, // of 2000 seeds; measured 1987 train, 1959 held-out
		MinSolverCalls:        4,    // measured 4.38: search, click, one or two options, buy
		MaxRandomSuccess:      0.15, // measured 0.010
		MaxRandomMeanReward:   0.3,  // measured 0.154
		// A search changes the page, so the inadmissible probe clicks a link the search page lacks.
		BadArgument: func(task.Opening) (proto.ToolCall, bool) {
			return proto.ToolCall{Name: webshop.ClickTool, Arguments: `{"target":"take zorkmid 9 from nowhere 42"}`}, true
		},
	})
}

func BenchmarkStep(b *testing.B) { tasktest.BenchStep(b, webshop.New()) }

func BenchmarkNew(b *testing.B) { tasktest.BenchNew(b, webshop.New()) }
