package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/config"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/nats-io/nats.go/jetstream"
)

// configCmd reads and writes the run config in KV (proto.BucketRun, key proto.KeyRunConfig): the settings
// `jetrl up` records and every service process takes at start for what its flags and environment leave
// unset (shared/config.Main).
type configCmd struct {
	Set  configSetCmd  `cmd:"" help:"Validate run settings as jetrl up does and write them to the run config in KV, where every service process takes them when it starts."`
	Show configShowCmd `cmd:"" help:"Print the run config in KV as YAML."`
}

// configSetCmd takes exactly jetrl up's flags (and --config file), validated as up validates them.
type configSetCmd struct {
	Settings upCmd `embed:""`
	Replicas int   `name:"stream-replicas" env:"JETRL_STREAM_REPLICAS" default:"1" help:"Replicas of the streams and buckets, if this creates them on a fresh server (3 on a 3-node cluster)."`
	DryRun   bool  `name:"dry-run" help:"Validate and print the settings as YAML; write nothing."`

	out io.Writer
}

// Run validates the settings, stores a --pool-checkpoint file in the weights Object Store (recording its
// object as the rollout's checkpoint and checkpoint_prob), and replaces the run config in KV.
func (c *configSetCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	s := &c.Settings
	if err := validateRun(s); err != nil {
		return err
	}
	if c.DryRun {
		y, err := settingsYAML(effectiveSettings(s))
		if err != nil {
			return err
		}
		_, err = out.Write(y)
		return err
	}
	if s.NATS == "" {
		s.NATS = os.Getenv("JETRL_NATS_URL")
	}
	if s.NATS == "" {
		return errors.New("--nats (or JETRL_NATS_URL): the server of the mesh is required")
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		return fmt.Errorf("--stream-replicas %d: want 1, 3 or 5", c.Replicas)
	}
	log, _ := logging.New("jetrl-config", "error", false, os.Stderr)
	nc, err := bus.Connect(ctx, s.NATS, "jetrl-config", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// A fresh server: create the mesh's topology, as every service does when it starts.
		if err = bus.EnsureTopology(ctx, js, c.Replicas); err == nil {
			kv, err = js.KeyValue(ctx, proto.BucketRun)
		}
	}
	if err != nil {
		return fmt.Errorf("kv %s: %w", proto.BucketRun, err)
	}
	settings := effectiveSettings(s)
	if s.PoolCkpt != "" {
		name, version, err := storePoolCheckpoint(ctx, js, s.PoolCkpt)
		if err != nil {
			return err
		}
		// The rollout process's --checkpoint names an object, not a file.
		settings["checkpoint"], settings["checkpoint_prob"] = name, s.PoolCkptProb
		fmt.Fprintf(out, "stored %s (version %d) as %s in %s\n", s.PoolCkpt, version, name, proto.BucketWeights)
	}
	j, err := settingsJSON(settings)
	if err != nil {
		return err
	}
	rev, err := kv.Put(ctx, proto.KeyRunConfig, j)
	if err != nil {
		return fmt.Errorf("kv %s/%s: %w", proto.BucketRun, proto.KeyRunConfig, err)
	}
	fmt.Fprintf(out, "wrote %d settings to KV %s/%s (revision %d); service processes take them when they start (jetrl config show prints them)\n",
		len(settings), proto.BucketRun, proto.KeyRunConfig, rev)
	return nil
}

// validateRun checks a run's settings: its flags and what each service would refuse when it starts
// (upCmd.Validate covers both).
func validateRun(s *upCmd) error { return s.Validate() }

// serviceChecks checks what the services would refuse when they start: task families, the trainer's
// objective, and the normalizer's, rollout's and replay-buffer's configurations.
func serviceChecks(s *upCmd) error {
	var errs []error
	families := builtin.Registry()
	for _, t := range s.Tasks {
		if _, err := families.Get(t); err != nil {
			errs = append(errs, fmt.Errorf("--tasks: %w", err))
		}
	}
	for t := range s.TaskWeights {
		if _, err := families.Get(t); err != nil {
			errs = append(errs, fmt.Errorf("--task-weights: %w", err))
		}
	}
	loss := trainer.Objective{Clip: s.Clip, DualClip: s.DualClip, KLCoef: s.KLCoef, EntropyCoef: s.EntropyCoef, TrapEntropyCoef: s.TrapEntropy, Correction: s.Correction, ISCap: s.ISCap}
	if err := loss.Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.Epochs < 1 {
		errs = append(errs, fmt.Errorf("--epochs %d must be at least 1", s.Epochs))
	}
	ncfg := normalizer.Config{AbnormalReward: s.AbnormalRew, TaskNorm: s.TaskNorm, FlatGroupCoef: s.FlatGroup}
	if err := ncfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	rcfg := rollout.Config{Tasks: s.Tasks, TaskWeights: s.TaskWeights, GroupSize: s.GroupSize, BatchSize: s.BatchSize, Eta: s.Eta,
		Concurrency: s.Concurrency, StaleProb: s.StaleProb, StaleEvery: s.StaleEvery, AdaptiveTasks: s.Adaptive}
	if s.PoolCkpt != "" {
		rcfg.CheckpointObject, rcfg.CheckpointProb = "pool", s.PoolCkptProb
	}
	rcfg.SetDefaults()
	if err := rcfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	bcfg := replaybuffer.Config{BatchSize: s.BatchSize, MaxBatchSize: s.MaxBatchSize, Eta: s.Eta, MaxQueued: s.MaxQueued, Lead: s.Lead, Cut: s.Cut}
	bcfg.SetDefaults()
	if err := bcfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

type configShowCmd struct {
	NATS string `name:"nats" required:"" env:"JETRL_NATS_URL" help:"NATS server URL of the mesh."`
	JSON bool   `name:"json" help:"Print the record as stored (JSON)."`

	out io.Writer
}

// Run prints the run config as YAML (loadable with jetrl up --config or jetrl config set --config).
func (c *configShowCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	log, _ := logging.New("jetrl-config", "error", false, os.Stderr)
	nc, err := bus.Connect(ctx, c.NATS, "jetrl-config", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	e, err := readRunEntry(ctx, js)
	if err != nil {
		return err
	}
	if c.JSON {
		_, err = out.Write(e.Value())
		return err
	}
	rc, err := config.ParseRunConfig(e.Value())
	if err != nil {
		return err
	}
	settings := make(map[string]any, len(rc))
	for k, v := range rc {
		settings[k] = plainNumbers(v)
	}
	y, err := settingsYAML(settings)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# run config: KV %s/%s, revision %d, written %s\n", proto.BucketRun, proto.KeyRunConfig, e.Revision(), e.Created().UTC().Format(time.RFC3339))
	_, err = out.Write(y)
	return err
}

// readRunEntry reads the run config record, with an error that says how to write one when there is none.
func readRunEntry(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValueEntry, error) {
	none := fmt.Errorf("no run config in KV %s/%s (jetrl up or jetrl config set writes one)", proto.BucketRun, proto.KeyRunConfig)
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, none
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", proto.BucketRun, err)
	}
	e, err := kv.Get(ctx, proto.KeyRunConfig)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, none
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s/%s: %w", proto.BucketRun, proto.KeyRunConfig, err)
	}
	return e, nil
}

// plainNumbers turns the json.Numbers of a decoded record into int64 or float64, for YAML.
func plainNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(x.String(), 10, 64); err == nil {
			return u
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plainNumbers(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plainNumbers(e)
		}
		return out
	}
	return v
}
