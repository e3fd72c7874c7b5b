// Command jetrl-trainer runs the trainer.
package main

import (
	"context"

	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	Seed      int64   `name:"seed" env:"JETRL_SEED" default:"1" help:"Seed of the initial policy."`
	LR        float64 `name:"lr" env:"JETRL_LR" default:"0" help:"Adam learning rate (0: the model's default)."`
	Epochs    int     `name:"epochs" env:"JETRL_EPOCHS" default:"2" help:"PPO epochs per batch."`
	TaskSalt  bool    `name:"task-salt" env:"JETRL_TASK_SALT" help:"Key the policy's candidate features by task (no weights shared between families)."`
	Eta       int     `name:"eta" env:"JETRL_ETA" default:"2" help:"Staleness bound."`
	TurnStale bool    `name:"turn-staleness" env:"JETRL_TURN_STALENESS" help:"Apply the staleness bound to each turn, by the version that produced it, instead of to the version an episode was admitted under (the replay-buffer and the trainer must agree)."`
	// The objective, with the names and defaults of jetrl up (trainer.DefaultConfig).
	Clip        float64 `name:"clip" env:"JETRL_CLIP" default:"0.2" help:"PPO clip ε."`
	DualClip    float64 `name:"dual-clip" env:"JETRL_DUAL_CLIP" default:"3" help:"Dual clip c for negative advantages (0: off)."`
	KLCoef      float64 `name:"kl-coef" env:"JETRL_KL_COEF" default:"0" help:"KL penalty to the initial policy (k3 estimator; 0: off)."`
	EntropyCoef float64 `name:"entropy-coef" env:"JETRL_ENTROPY_COEF" default:"0.01" help:"Entropy bonus (0: off)."`
	TrapEntropy float64 `name:"trap-entropy-coef" env:"JETRL_TRAP_ENTROPY_COEF" default:"0" help:"Extra entropy bonus on the answer turn of groups that all failed, in a family that won at least half its episodes in the batch (0: off)."`
	Correction  string  `name:"correction" env:"JETRL_CORRECTION" enum:"none,decoupled,truncated" default:"none" help:"Off-policy correction: none, decoupled (AReaL's proximal objective) or truncated (importance weights capped at --is-cap)."`
	ISCap       float64 `name:"is-cap" env:"JETRL_IS_CAP" default:"2" help:"Importance weight cap of --correction truncated."`
}

func main() {
	var c cli
	config.Main("trainer", "jetrl trainer: PPO updates, checkpoints and weights.", &c, func(ctx context.Context, p config.Process) error {
		t, err := trainer.New(c.trainerConfig(), trainer.Deps{Conn: p.Conn, Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		return t.Run(ctx)
	})
}

func (c *cli) trainerConfig() trainer.Config {
	cfg := trainer.DefaultConfig()
	cfg.Model.Seed, cfg.Model.TaskSalt, cfg.Epochs, cfg.Eta, cfg.Adam.LR = c.Seed, c.TaskSalt, c.Epochs, c.Eta, c.LR
	cfg.TurnStaleness = c.TurnStale
	cfg.Loss = trainer.Objective{Clip: c.Clip, DualClip: c.DualClip, KLCoef: c.KLCoef, EntropyCoef: c.EntropyCoef, TrapEntropyCoef: c.TrapEntropy, Correction: c.Correction, ISCap: c.ISCap}
	return cfg
}
