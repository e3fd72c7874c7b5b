package alfworld_test

import (
	"testing"
	"time"

	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// TestLearnable: the built-in policy learns alfworld from held-out success near 0 to at least 80%.
func TestLearnable(t *testing.T) {
	tasktest.Learn(t, alfworld.New(), tasktest.LearnOptions{Budget: 150 * time.Second})
}
