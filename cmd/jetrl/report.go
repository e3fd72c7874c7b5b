package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/report"
	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
	"github.com/jetrl/jetrl/services/env/task/builtin"
)

type reportCmd struct {
	Out           string   `name:"out" default:"out/report" help:"Output folder: report.md, report.json, curves.png and runs/<method>/seed-<n>/."`
	Tasks         []string `name:"tasks" default:"alfworld,db,kg,os,webshop" help:"Task families."`
	Methods       []string `name:"methods" default:"full,no-task-norm,no-cross-policy,single" help:"Which runs: full, no-task-norm, no-cross-policy, single (each family alone)."`
	Seeds         int      `name:"seeds" default:"3" help:"Seeds per method (1, 2, ...)."`
	Minutes       float64  `name:"minutes" default:"10" help:"Training time of each multi-task run (full method and ablations)."`
	SingleMinutes float64  `name:"single-minutes" default:"4" help:"Training time of each single-family run."`
	SingleTarget  float64  `name:"single-target" default:"0.99" help:"A single-family run stops early once its periodic held-out success reaches this (its ceiling; 0: always the full time)."`
	EvalEpisodes  int      `name:"eval-episodes" default:"200" help:"Held-out episodes per family at the end of each run and for the baselines."`
	RunConfig     string   `name:"run-config" type:"existingfile" help:"YAML settings passed to every run (jetrl up --config)."`
	Resume        bool     `name:"resume" default:"true" negatable:"" help:"Keep runs that already have a summary.json instead of running them again."`
	Command       string   `name:"command" help:"The command line to print as the way to regenerate the report (default: this one)."`
	Merge         []string `name:"merge" type:"existingfile" help:"Instead of running anything, join these report.json files of earlier runs (a later file's row of a method replaces an earlier one's) into report.md and report.json in --out."`
}

func (c *reportCmd) Validate() error {
	var errs []error
	if c.Seeds < 1 {
		errs = append(errs, fmt.Errorf("--seeds %d must be at least 1", c.Seeds))
	}
	if c.Minutes <= 0 || c.SingleMinutes <= 0 {
		errs = append(errs, fmt.Errorf("--minutes %v and --single-minutes %v must be positive", c.Minutes, c.SingleMinutes))
	}
	if c.SingleTarget < 0 || c.SingleTarget > 1 {
		errs = append(errs, fmt.Errorf("--single-target %v must be in [0, 1]", c.SingleTarget))
	}
	reg := builtin.Registry()
	for _, t := range c.Tasks {
		if _, err := reg.Get(t); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range c.Methods {
		if !slices.Contains([]string{report.Full, report.NoTaskNorm, report.NoCrossPolicy, report.Single}, m) {
			errs = append(errs, fmt.Errorf("--methods: unknown method %q (full, no-task-norm, no-cross-policy, single)", m))
		}
	}
	return errors.Join(errs...)
}

// reportRun is one `jetrl up` of the report.
type reportRun struct {
	method string
	seed   uint64
	dir    string
	args   []string
}

func (c *reportCmd) plan() []reportRun {
	var runs []reportRun
	all := strings.Join(c.Tasks, ",")
	minutes := strconv.FormatFloat(c.Minutes, 'f', -1, 64)
	single := strconv.FormatFloat(c.SingleMinutes, 'f', -1, 64)
	for seed := uint64(1); seed <= uint64(c.Seeds); seed++ {
		for _, m := range c.Methods {
			var variants []reportRun
			switch m {
			case report.Full:
				variants = []reportRun{{method: m, args: []string{"--tasks", all, "--minutes", minutes}}}
			case report.NoTaskNorm:
				variants = []reportRun{{method: m, args: []string{"--tasks", all, "--minutes", minutes, "--no-task-norm"}}}
			case report.NoCrossPolicy:
				variants = []reportRun{{method: m, args: []string{"--tasks", all, "--minutes", minutes, "--stale-prob", "0"}}}
			case report.Single:
				for _, t := range c.Tasks {
					variants = append(variants, reportRun{method: report.Single + "-" + t, args: []string{"--tasks", t, "--minutes", single,
						"--target", strconv.FormatFloat(c.SingleTarget, 'f', -1, 64)}})
				}
			}
			for _, v := range variants {
				v.seed = seed
				v.dir = filepath.Join(c.Out, "runs", v.method, fmt.Sprintf("seed-%d", seed))
				v.args = append([]string{"up", "--quiet", "--metrics-addr", "", "--seed", strconv.FormatUint(seed, 10),
					"--eval-episodes", strconv.Itoa(c.EvalEpisodes), "--out", v.dir}, v.args...)
				if c.RunConfig != "" {
					v.args = append(v.args, "--config", c.RunConfig)
				}
				runs = append(runs, v)
			}
		}
	}
	return runs
}

func (c *reportCmd) Run(g *globals) error {
	if len(c.Merge) > 0 {
		return c.merge()
	}
	ctx, stop := signalContext()
	defer stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	plan := c.plan()
	var budget time.Duration
	for _, r := range plan {
		if !c.done(r) {
			budget += time.Duration(c.minutesOf(r) * float64(time.Minute))
		}
	}
	fmt.Fprintf(os.Stderr, "jetrl report: %d runs (%s of training still to do), output %s\n", len(plan), budget.Round(time.Minute), c.Out)
	var runs []report.Run
	for i, r := range plan {
		if !c.done(r) {
			fmt.Fprintf(os.Stderr, "[%d/%d] %s seed %d: training %v min...\n", i+1, len(plan), r.method, r.seed, c.minutesOf(r))
			if err := c.execute(ctx, self, r); err != nil {
				return err
			}
		}
		run, err := report.ReadRun(r.dir, r.method)
		if err != nil {
			return fmt.Errorf("%s seed %d: %w", r.method, r.seed, err)
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %s seed %d: held-out %s\n", i+1, len(plan), r.method, r.seed, successLine(run.Summary))
		runs = append(runs, run)
	}
	baselines := map[string]report.Baseline{}
	for _, p := range []string{"random", "solver"} {
		res, err := (&evalCmd{Policy: p, Tasks: c.Tasks, Episodes: c.EvalEpisodes, Seed: 1}).baseline(builtin.Registry())
		if err != nil {
			return fmt.Errorf("%s baseline: %w", p, err)
		}
		bl := report.Baseline{Success: map[string]float64{}, Reward: map[string]float64{}}
		for t, r := range res {
			bl.Success[t], bl.Reward[t] = r.Success, r.MeanReward
		}
		baselines[p] = bl
	}
	rep, err := report.Build(c.Tasks, runs, baselines)
	if err != nil {
		return err
	}
	rep.Notes = fmt.Sprintf("Each multi-task run trains %v minutes and each single-family run %v minutes on this machine, from an untrained policy; "+
		"held-out success is the greedy policy on %d held-out instances per family.", c.Minutes, c.SingleMinutes, c.EvalEpisodes)
	if c.SingleTarget > 0 {
		rep.Notes += fmt.Sprintf(" A single-family run stops early once its periodic held-out check (%d instances) reaches %.0f%%.", max(c.EvalEpisodes/2, 20), 100*c.SingleTarget)
	}
	command := c.Command
	if command == "" {
		command = "jetrl " + strings.Join(os.Args[1:], " ")
	}
	md := rep.Markdown(command)
	if err := os.WriteFile(filepath.Join(c.Out, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := runout.WriteJSON(c.Out, "report.json", rep); err != nil {
		return err
	}
	if err := report.Plot(filepath.Join(c.Out, "curves.png"), c.Tasks, runs); err != nil {
		return err
	}
	fmt.Print(md)
	fmt.Printf("\nwrote %s, %s, %s\n", filepath.Join(c.Out, "report.md"), filepath.Join(c.Out, "report.json"), filepath.Join(c.Out, "curves.png"))
	return nil
}

// merge joins earlier reports' tables (their curves need the runs, so none is drawn).
func (c *reportCmd) merge() error {
	var reports []report.Report
	var names, notes []string
	wd, _ := os.Getwd()
	for _, path := range c.Merge {
		var rep report.Report
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		reports = append(reports, rep)
		if rel, err := filepath.Rel(wd, path); err == nil {
			path = rel
		}
		names = append(names, path)
		if rep.Notes != "" && !slices.Contains(notes, rep.Notes) {
			notes = append(notes, rep.Notes)
		}
	}
	note := "Rows joined from " + strings.Join(names, ", ") + " (a later file's row of a method replaces an earlier one's). " + strings.Join(notes, " ")
	rep, err := report.Merge(reports, strings.TrimSpace(note))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	command := c.Command
	if command == "" {
		command = "jetrl " + strings.Join(os.Args[1:], " ")
	}
	md := rep.Markdown(command)
	if err := os.WriteFile(filepath.Join(c.Out, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := runout.WriteJSON(c.Out, "report.json", rep); err != nil {
		return err
	}
	fmt.Print(md)
	fmt.Printf("\nwrote %s, %s\n", filepath.Join(c.Out, "report.md"), filepath.Join(c.Out, "report.json"))
	return nil
}

func (c *reportCmd) minutesOf(r reportRun) float64 {
	if strings.HasPrefix(r.method, report.Single+"-") {
		return c.SingleMinutes
	}
	return c.Minutes
}

// done reports whether a run finished before (with Resume): its summary.json exists and it was not cut
// short by an interrupt.
func (c *reportCmd) done(r reportRun) bool {
	if !c.Resume {
		return false
	}
	run, err := report.ReadRun(r.dir, r.method)
	return err == nil && !run.Summary.Interrupted
}

// execute runs one `jetrl up` as a child process (a fresh embedded NATS and mesh each time), its output
// going to <dir>/report.log.
func (c *reportCmd) execute(ctx context.Context, self string, r reportRun) error {
	if err := os.RemoveAll(r.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(r.dir, "report.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, self, r.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s seed %d: jetrl %s: %w (see %s)", r.method, r.seed, strings.Join(r.args, " "), err, filepath.Join(r.dir, "report.log"))
	}
	return nil
}

func successLine(s runout.Summary) string {
	names := make([]string, 0, len(s.Tasks))
	for t := range s.Tasks {
		names = append(names, t)
	}
	slices.Sort(names)
	var parts []string
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", t, 100*s.Tasks[t].HeldoutSuccessAfter))
	}
	return strings.Join(parts, " ")
}
