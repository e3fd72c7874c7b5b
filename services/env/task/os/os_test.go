package os_test

import (
	"testing"

	ostask "github.com/jetrl/jetrl/services/env/task/os"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

func TestConformance(t *testing.T) {
	tasktest.RunConformance(t, ostask.New(), tasktest.Options{
		SolverCallsAdmissible: true,
		MinDistinct:           1990, // of 2000 seeds; instances are drawn from far more than 10,000
		MinSolverCalls:        3.5,  // measured 3.81: ls, ls, query, answer (3 for file counts)
		MaxRandomSuccess:      0.05, // measured 0.000
	})
}

func BenchmarkStep(b *testing.B) { tasktest.BenchStep(b, ostask.New()) }

func BenchmarkNew(b *testing.B) { tasktest.BenchNew(b, ostask.New()) }
