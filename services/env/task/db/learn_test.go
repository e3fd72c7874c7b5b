package db_test

import (
	"testing"

	"github.com/jetrl/jetrl/services/env/task/db"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// TestLearnable: the built-in policy learns db from held-out success near 0 to at least 80%.
func TestLearnable(t *testing.T) {
	tasktest.Learn(t, db.New(), tasktest.LearnOptions{})
}
