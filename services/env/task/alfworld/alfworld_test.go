package alfworld_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

func TestConformance(t *testing.T) {
	tasktest.RunConformance(t, alfworld.New(), tasktest.Options{
		InadmissibleMarker:    "not admissible",
		SolverCallsAdmissible: true,
		MinDistinct:           1990, // of 2000 seeds; instances are drawn from far more than 10,000
		MinSolverCalls:        4,
		MaxRandomSuccess:      0.05, // measured about 0.005
	})
}

func BenchmarkStep(b *testing.B) { tasktest.BenchStep(b, alfworld.New()) }

func BenchmarkNew(b *testing.B) { tasktest.BenchNew(b, alfworld.New()) }
