package db_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/db"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

func conformanceOptions() tasktest.Options {
	o := tasktest.Options{
		SolverCallsAdmissible: true,
		MinSolverCalls:        3.05, // two-step questions need a fourth call
		MinDistinct:           1990, // of 2000 seeds; instances are drawn from far more than 10,000
		MaxRandomSuccess:      0.10, // measured about 0.03
	}
	if db.RaceEnabled { // the full samples (500 solver and random episodes) run without -race
		o.SplitSample, o.MinDistinct = 200, 198
		o.SolverEpisodes, o.RandomEpisodes = 150, 150
		o.AdmissibleInstances = 6
	}
	return o
}

func TestConformance(t *testing.T) {
	tasktest.RunConformance(t, db.New(), conformanceOptions())
}

func BenchmarkStep(b *testing.B) { tasktest.BenchStep(b, db.New()) }

func BenchmarkNew(b *testing.B) { tasktest.BenchNew(b, db.New()) }
