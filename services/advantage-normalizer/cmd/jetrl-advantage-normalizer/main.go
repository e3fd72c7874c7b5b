// Command jetrl-advantage-normalizer runs the advantage-normalizer.
package main

import (
	"context"

	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	AbnormalReward float64 `name:"abnormal-reward" env:"JETRL_ABNORMAL_REWARD" default:"-0.2" help:"Reward of episodes ended abnormally."`
	NoTaskNorm     bool    `name:"no-task-norm" env:"JETRL_NO_TASK_NORM" help:"Turn task advantage normalization off (as task_norm: false in the run config does)."`
	FlatGroupCoef  float64 `name:"flat-group-coef" env:"JETRL_FLAT_GROUP_COEF" default:"0.5" help:"Advantage of a group whose rewards are all equal: this times (reward - its task's mean reward in the batch) (0: zero, plain GRPO)."`
}

func main() {
	var c cli
	config.Main("advantage-normalizer", "jetrl advantage-normalizer: GRPO advantages and task normalization.", &c, func(ctx context.Context, p config.Process) error {
		n, err := normalizer.New(normalizer.Config{AbnormalReward: c.AbnormalReward, TaskNorm: !c.NoTaskNorm, FlatGroupCoef: c.FlatGroupCoef},
			normalizer.Deps{Conn: p.Conn, Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		return n.Run(ctx)
	})
}
