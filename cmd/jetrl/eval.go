package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
)

type evalCmd struct {
	Weights  string   `name:"weights" help:"Weights file, or a run's output folder holding weights.bin."`
	Policy   string   `name:"policy" enum:",random,solver" default:"" help:"Evaluate a baseline instead of weights: random or solver."`
	Tasks    []string `name:"tasks" default:"alfworld" help:"Task families, comma separated."`
	Episodes int      `name:"episodes" default:"200" help:"Held-out episodes per task."`
	Seed     uint64   `name:"seed" default:"1" help:"Seed of the instances."`
	JSON     bool     `name:"json" help:"Print JSON instead of a table."`
	NATS     string   `name:"nats" help:"Use the env hosts behind this NATS server instead of in-process ones."`
	Failures int      `name:"failures" default:"0" help:"Show the first this many failed episodes of each task (instruction and the calls chosen); weights only."`
}

func (c *evalCmd) Validate() error {
	if (c.Weights == "") == (c.Policy == "") {
		return errors.New("give exactly one of --weights or --policy")
	}
	if c.Episodes < 1 {
		return fmt.Errorf("--episodes %d must be at least 1", c.Episodes)
	}
	if c.Failures < 0 {
		return fmt.Errorf("--failures %d must not be negative", c.Failures)
	}
	if c.Failures > 0 && c.Policy != "" {
		return errors.New("--failures shows the episodes of --weights, not of a baseline")
	}
	return nil
}

func (c *evalCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	reg := builtin.Registry()
	for _, t := range c.Tasks {
		if _, err := reg.Get(t); err != nil {
			return err
		}
	}
	var res map[string]rollout.EvalResult
	var err error
	if c.Policy != "" {
		res, err = c.baseline(reg)
	} else {
		res, err = c.weights(ctx, reg)
	}
	if err != nil {
		return err
	}
	return printEval(res, c.JSON)
}

// baseline plays the scripted solver (which reads the game's hidden state) or a uniform random policy
// directly against the task families.
func (c *evalCmd) baseline(reg task.Registry) (map[string]rollout.EvalResult, error) {
	out := map[string]rollout.EvalResult{}
	for _, t := range c.Tasks {
		f, _ := reg.Get(t)
		var r task.Baseline
		var err error
		if c.Policy == "solver" {
			r, err = task.SolverRate(f, "heldout", c.Episodes, c.Seed)
		} else {
			r, err = task.RandomRate(f, "heldout", c.Episodes, c.Seed)
		}
		if err != nil {
			return nil, err
		}
		out[t] = rollout.EvalResult{Success: r.SuccessRate, MeanReward: r.MeanReward, Episodes: r.Episodes, MeanTurns: r.MeanTurns}
	}
	return out, nil
}

// weights plays the policy greedily through env hosts over NATS (in-process ones on an embedded server
// unless --nats names a running mesh).
func (c *evalCmd) weights(ctx context.Context, reg task.Registry) (map[string]rollout.EvalResult, error) {
	path := c.Weights
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, runout.WeightsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	model, err := policy.Load(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	log, _ := logging.New("jetrl-eval", "error", false, os.Stderr)
	url := c.NATS
	var dial []nats.Option
	if url == "" {
		dir, err := os.MkdirTemp("", "jetrl-eval-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
		if err != nil {
			return nil, err
		}
		defer srv.Shutdown()
		url, dial = srv.URL(), []nats.Option{srv.InProcess()}
		hc, err := bus.Connect(ctx, url, "jetrl-eval-env", log, dial...)
		if err != nil {
			return nil, err
		}
		defer hc.Close()
		h, err := env.New(env.Config{}, env.Deps{Conn: hc, Families: reg, Log: log})
		if err != nil {
			return nil, err
		}
		hctx, stopHost := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- h.Run(hctx) }()
		defer func() { stopHost(); <-done }()
		for !h.Running() {
			select {
			case err := <-done:
				return nil, err
			default:
			}
		}
	}
	nc, err := bus.Connect(ctx, url, "jetrl-eval", log, dial...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	pool := rollout.NewWeightsPool(0, 0, true, c.Seed)
	pool.Set(model, 0)
	return rollout.Evaluate(ctx, envclient.New(nc, envclient.Config{}), pool, rollout.EvalConfig{Tasks: c.Tasks, Episodes: c.Episodes, Seed: c.Seed, Failures: c.Failures})
}

func printEval(res map[string]rollout.EvalResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"tasks": res})
	}
	names := make([]string, 0, len(res))
	for t := range res {
		names = append(names, t)
	}
	sort.Strings(names)
	fmt.Printf("%-10s %9s %12s %11s %9s %14s\n", "task", "success", "mean reward", "mean turns", "episodes", "infra failures")
	for _, t := range names {
		r := res[t]
		fmt.Printf("%-10s %8.1f%% %12.3f %11.2f %9d %14d\n", t, 100*r.Success, r.MeanReward, r.MeanTurns, r.Episodes, r.InfraFailures)
	}
	for _, t := range names {
		fails := res[t].Failures
		if len(fails) == 0 {
			continue
		}
		fmt.Printf("\n%s: first %d failed episodes (index, status, reward; instruction; calls chosen)\n", t, len(fails))
		for _, f := range fails {
			fmt.Printf("#%d %s %.2f: %s\n    %s\n", f.Index, f.Status, f.Reward, f.Instruction, strings.Join(f.Calls, " | "))
		}
	}
	return nil
}
