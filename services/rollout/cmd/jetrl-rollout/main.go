// Command jetrl-rollout runs one rollout replica.
package main

import (
	"context"

	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/config"
)

type cli struct {
	config.Common
	ID          string             `name:"id" env:"JETRL_ROLLOUT_ID" help:"Replica id, unique among the live replicas (default: the container's hostname when this process is its container's first, pid 1, so a replica restarted in its container keeps its id; otherwise random)."`
	Tasks       []string           `name:"tasks" env:"JETRL_TASKS" default:"alfworld" help:"Task families to train on."`
	TaskWeights map[string]float64 `name:"task-weights" env:"JETRL_TASK_WEIGHTS" mapsep:"," help:"Share of groups per task, e.g. alfworld=2,os=2 (default 1 each)."`
	GroupSize   int                `name:"group-size" env:"JETRL_GROUP_SIZE" default:"8" help:"GRPO group size G."`
	BatchSize   int                `name:"batch-size" env:"JETRL_BATCH_SIZE" default:"64" help:"Batch size B in episodes."`
	Eta         int                `name:"eta" env:"JETRL_ETA" default:"2" help:"Staleness bound (0: synchronous)."`
	StopStale   bool               `name:"stop-stale" env:"JETRL_STOP_STALE" help:"Stop playing an episode once no batch can take it (the replay-buffer composed the last batch that could, or the trainer passed its admission version by more than --eta). Ignored with --turn-staleness."`
	TurnStale   bool               `name:"turn-staleness" env:"JETRL_TURN_STALENESS" help:"The replay-buffer and the trainer judge each turn (their --turn-staleness): --stop-stale is then off."`
	Concurrency int                `name:"concurrency" env:"JETRL_ROLLOUT_CONCURRENCY" default:"64" help:"Episodes played at once."`
	StaleProb   float64            `name:"stale-prob" env:"JETRL_STALE_PROB" default:"0.25" help:"Probability a turn uses the stale policy copy (0: off)."`
	StaleEvery  int64              `name:"stale-every" env:"JETRL_STALE_EVERY" default:"25" help:"Refresh the stale copy every this many versions."`
	Adaptive    bool               `name:"adaptive-tasks" env:"JETRL_ADAPTIVE_TASKS" default:"true" negatable:"" help:"Scale each task's share by what its groups still teach (differing rewards, or mean reward short of 1)."`
	Checkpoint  string             `name:"checkpoint" env:"JETRL_CHECKPOINT_OBJECT" help:"A saved policy in the weights Object Store that joins the pool as a fixed member."`
	CheckpointP float64            `name:"checkpoint-prob" env:"JETRL_CHECKPOINT_PROB" default:"0" help:"Probability a turn uses --checkpoint."`
	Seed        uint64             `name:"seed" env:"JETRL_SEED" default:"1" help:"Seed of instance draws and sampling."`
}

func main() {
	var c cli
	config.Main("rollout", "jetrl rollout replica: plays episodes and publishes them.", &c, func(ctx context.Context, p config.Process) error {
		id, from := config.ServiceID(c.ID)
		r, err := rollout.New(rollout.Config{ID: id, Tasks: c.Tasks, TaskWeights: c.TaskWeights, GroupSize: c.GroupSize, BatchSize: c.BatchSize, Eta: c.Eta, StopStale: c.StopStale && !c.TurnStale,
			Concurrency: c.Concurrency, StaleProb: c.StaleProb, StaleEvery: c.StaleEvery, Seed: c.Seed,
			AdaptiveTasks: c.Adaptive, CheckpointObject: c.Checkpoint, CheckpointProb: c.CheckpointP},
			rollout.Deps{Conn: p.Conn, Log: p.Log, Metrics: p.Metrics})
		if err != nil {
			return err
		}
		p.Log.Info().Str("rollout", r.Status().ID).Str("id_from", from).Msg("rollout replica id")
		return r.Run(ctx)
	})
}
