// Command jetrl-trainer runs the trainer.
package main

import (
	"context"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	Seed     int64   `name:"seed" env:"JETRL_SEED" default:"1" help:"Seed of the initial policy."`
	LR       float64 `name:"lr" env:"JETRL_LR" default:"0" help:"Adam learning rate (0: the model's default)."`
	Epochs   int     `name:"epochs" env:"JETRL_EPOCHS" default:"2" help:"PPO epochs per batch."`
	TaskSalt bool    `name:"task-salt" env:"JETRL_TASK_SALT" help:"Key the policy's candidate features by task (no weights shared between families)."`
	Eta      int     `name:"eta" env:"JETRL_ETA" default:"2" help:"Staleness bound."`
}

func main() {
	var c cli
	k := kong.Parse(&c, kong.Description("jetrl trainer: PPO updates, checkpoints and weights."))
	k.FatalIfErrorf(config.Run("trainer", c.Common, func(ctx context.Context, p config.Process) error {
		cfg := trainer.DefaultConfig()
		cfg.Model.Seed, cfg.Model.TaskSalt, cfg.Epochs, cfg.Eta, cfg.Adam.LR = c.Seed, c.TaskSalt, c.Epochs, c.Eta, c.LR
		t, err := trainer.New(cfg, trainer.Deps{Conn: p.Conn, Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		return t.Run(ctx)
	}))
}
