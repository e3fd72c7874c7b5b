package kg_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/kg"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

func TestConformance(t *testing.T) {
	tasktest.RunConformance(t, kg.New(), tasktest.Options{
		InadmissibleMarker:    "invalid argument",
		SolverCallsAdmissible: true,
		MinDistinct:           1990,
		MinSolverCalls:        4,
		MaxRandomSuccess:      0.10, // measured about 0.04
	})
}

func BenchmarkStep(b *testing.B) { tasktest.BenchStep(b, kg.New()) }

func BenchmarkNew(b *testing.B) { tasktest.BenchNew(b, kg.New()) }
