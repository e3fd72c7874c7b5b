package kg_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/kg"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// TestLearnable: the built-in policy learns kg from held-out success near 0 to at least 80%.
func TestLearnable(t *testing.T) {
	tasktest.Learn(t, kg.New(), tasktest.LearnOptions{})
}
