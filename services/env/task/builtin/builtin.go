// Package builtin lists the task families compiled into jetrl. It lives apart from package task because
// each family imports task.
package builtin

import (
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/alfworld"
	"github.com/jetrl/jetrl/services/env/task/db"
	"github.com/jetrl/jetrl/services/env/task/kg"
	"github.com/jetrl/jetrl/services/env/task/os"
	"github.com/jetrl/jetrl/services/env/task/webshop"
)

// Registry returns a fresh registry of the built-in families, keyed by name.
func Registry() task.Registry {
	r := task.Registry{}
	for _, f := range []task.Family{alfworld.New(), db.New(), kg.New(), os.New(), webshop.New()} {
		r[f.Name()] = f
	}
	return r
}
