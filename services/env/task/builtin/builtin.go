// Package builtin lists the task families that ship with jetrl.
package builtin

import (
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
)

// Registry returns every built-in family by name.
func Registry() task.Registry {
	return task.Registry{"alfworld": alfworld.New()}
}
