// Command jetrl-env runs one env host.
package main

import (
	"context"
	"time"

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
	LatencyMed  time.Duration `name:"step-latency-median" env:"JETRL_ENV_STEP_LATENCY_MEDIAN" default:"0" help:"Add a lognormal latency with this median to every step, to emulate a slow environment (0: none)."`
	LatencyP99  time.Duration `name:"step-latency-p99" env:"JETRL_ENV_STEP_LATENCY_P99" default:"0" help:"99th percentile of the added step latency (0: the median, a constant latency)."`
	LatencySeed uint64        `name:"step-latency-seed" env:"JETRL_ENV_STEP_LATENCY_SEED" default:"1" help:"Seed of the step latency draws."`
}

func main() {
	var c cli
	config.Main("env", "jetrl env host: task sessions behind the function-call API.", &c, func(ctx context.Context, p config.Process) error {
		latency, err := env.LatencyConfig{Median: c.LatencyMed, P99: c.LatencyP99, Seed: c.LatencySeed}.StepLatency()
		if err != nil {
			return err
		}
		h, err := env.New(env.Config{HostID: c.HostID, Capacity: c.Capacity, IdleTimeout: c.IdleTimeout, CallTimeout: c.CallTimeout, StepLatency: latency},
			env.Deps{Conn: p.Conn, Families: builtin.Registry(), Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		return h.Run(ctx)
	})
}
