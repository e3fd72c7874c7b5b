// Command jetrl-env runs one env host.
package main

import (
	"context"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	HostID      string        `name:"host-id" env:"JETRL_ENV_HOST_ID" help:"Host id (default: random)."`
	Capacity    int           `name:"capacity" env:"JETRL_ENV_CAPACITY" default:"4096" help:"Most sessions held at once."`
	IdleTimeout time.Duration `name:"idle-timeout" env:"JETRL_ENV_IDLE_TIMEOUT" default:"5m" help:"Expire sessions idle this long."`
	CallTimeout time.Duration `name:"call-timeout" env:"JETRL_ENV_CALL_TIMEOUT" default:"4m" help:"Fail a step slower than this."`
}

func main() {
	var c cli
	k := kong.Parse(&c, kong.Description("jetrl env host: task sessions behind the function-call API."))
	k.FatalIfErrorf(config.Run("env", c.Common, func(ctx context.Context, p config.Process) error {
		h, err := env.New(env.Config{HostID: c.HostID, Capacity: c.Capacity, IdleTimeout: c.IdleTimeout, CallTimeout: c.CallTimeout},
			env.Deps{Conn: p.Conn, Families: builtin.Registry(), Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		return h.Run(ctx)
	}))
}
