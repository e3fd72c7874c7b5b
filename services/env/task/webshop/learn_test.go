package webshop_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/tasktest"
	"github.com/jetrl/jetrl/services/env/task/webshop"
)

// TestLearnable: the built-in policy learns webshop from held-out success near 0 to at least 80%.
func TestLearnable(t *testing.T) {
	tasktest.Learn(t, webshop.New(), tasktest.LearnOptions{})
}
