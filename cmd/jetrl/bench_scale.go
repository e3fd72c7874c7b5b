package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
)

// benchScaleCmd runs the mesh once per rollout replica count, each time on a fresh embedded server, against
// env hosts whose steps take a lognormal latency (the async-vs-sync workload), with a low concurrency per
// replica so that the replicas, not the trainer or the staleness bound, limit throughput. Every count is
// measured over the same trained episodes (the same stretch of learning), since episode lengths change as
// the policy learns.
type benchScaleCmd struct {
	Replicas      []int         `name:"replicas" default:"1,2,4" help:"Rollout replica counts to measure, comma separated."`
	Concurrency   int           `name:"concurrency" default:"8" help:"Episodes each rollout replica plays at once (8: one group at a time)."`
	Tasks         []string      `name:"tasks" default:"db,kg,webshop" help:"Task families of the workload."`
	Episodes      int64         `name:"episodes" default:"1024" help:"Trained episodes measured per replica count (after the warm-up)."`
	Warmup        int64         `name:"warmup" default:"1" help:"Batches trained before the measurement starts."`
	GroupSize     int           `name:"group-size" default:"8" help:"GRPO group size G."`
	BatchSize     int           `name:"batch-size" default:"128" help:"Batch size B in episodes (every batch holds exactly B)."`
	Eta           int           `name:"eta" default:"2" help:"Staleness bound."`
	Epochs        int           `name:"epochs" default:"2" help:"PPO epochs per batch."`
	LatencyMedian time.Duration `name:"latency-median" default:"20ms" help:"Median of the lognormal env step latency."`
	LatencyP99    time.Duration `name:"latency-p99" default:"400ms" help:"99th percentile of the lognormal env step latency."`
	EnvHosts      int           `name:"env-hosts" default:"2" help:"Env hosts."`
	Seed          uint64        `name:"seed" default:"1" help:"Seed of the policy, instances and latency draws."`
	Timeout       time.Duration `name:"timeout" default:"30m" help:"Give up a replica count after this long."`
	JSON          bool          `name:"json" help:"Print one JSON object instead of a table."`
	LogLevel      string        `name:"log-level" default:"error" help:"Level of the services' log on stderr."`
	CPUProfile    string        `name:"cpuprofile" help:"Write a CPU profile of every run to this file (go tool pprof)."`
	// policyBits, if set, shrinks the policy (log2 of its weights) for the smoke tests; not a flag.
	policyBits int
}

// scaleBenchResult is what bench scale prints with --json; maps are keyed by replica count.
type scaleBenchResult struct {
	EpisodesPerS map[string]float64      `json:"episodes_per_s"`
	EnvStepsPerS map[string]float64      `json:"env_steps_per_s"`
	Speedup      map[string]float64      `json:"speedup"`
	TrainerBusy  map[string]float64      `json:"trainer_busy"`
	MaxStaleness int64                   `json:"max_staleness"`
	Eta          int                     `json:"eta"`
	Runs         map[string]*trialResult `json:"runs"`
	Workload     scaleWorkload           `json:"workload"`
}

// scaleWorkload records the settings every count ran with.
type scaleWorkload struct {
	Tasks           []string `json:"tasks"`
	Episodes        int64    `json:"episodes"`
	WarmupBatches   int64    `json:"warmup_batches"`
	ConcurrencyEach int      `json:"concurrency_per_replica"`
	GroupSize       int      `json:"group_size"`
	BatchSize       int      `json:"batch_size"`
	Epochs          int      `json:"epochs"`
	LatencyMedianMS float64  `json:"latency_median_ms"`
	LatencyP99MS    float64  `json:"latency_p99_ms"`
	EnvHosts        int      `json:"env_hosts"`
	Seed            uint64   `json:"seed"`
}

func (c *benchScaleCmd) Validate() error {
	var errs []error
	if len(c.Replicas) == 0 {
		errs = append(errs, errors.New("--replicas is empty"))
	}
	for _, n := range c.Replicas {
		if n < 1 {
			errs = append(errs, fmt.Errorf("--replicas: %d must be at least 1", n))
		}
	}
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("--tasks is empty"))
	}
	if c.Episodes < 1 || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--episodes %d must be at least 1 and --warmup %d not negative", c.Episodes, c.Warmup))
	}
	if c.GroupSize < 2 || c.BatchSize < c.GroupSize || c.BatchSize%c.GroupSize != 0 {
		errs = append(errs, fmt.Errorf("--batch-size %d must be a multiple of --group-size %d (at least 2)", c.BatchSize, c.GroupSize))
	}
	if c.Concurrency < c.GroupSize {
		errs = append(errs, fmt.Errorf("--concurrency %d must be at least the group size %d", c.Concurrency, c.GroupSize))
	}
	if c.Eta < 0 || c.Epochs < 1 || c.EnvHosts < 1 {
		errs = append(errs, errors.New("--eta must not be negative, --epochs and --env-hosts at least 1"))
	}
	if _, err := c.latency().StepLatency(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *benchScaleCmd) latency() env.LatencyConfig {
	return env.LatencyConfig{Median: c.LatencyMedian, P99: c.LatencyP99, Seed: c.Seed}
}

func (c *benchScaleCmd) trial(replicas int) trialConfig {
	tcfg := trainer.DefaultConfig()
	tcfg.Model.Seed = int64(c.Seed)
	tcfg.Model.Bits = c.policyBits
	tcfg.Epochs = c.Epochs
	return trialConfig{
		Mesh: mesh.Config{
			Tasks: c.Tasks, Seed: c.Seed, GroupSize: c.GroupSize, BatchSize: c.BatchSize, MaxBatchSize: c.BatchSize, Eta: c.Eta,
			EnvHosts: c.EnvHosts, Rollouts: replicas, Trainer: tcfg, Normalizer: normalizer.DefaultConfig(),
			Rollout: rollout.Config{Concurrency: c.Concurrency},
		},
		Latency: c.latency(), WarmupBatches: c.Warmup, Episodes: c.Episodes, Timeout: c.Timeout,
	}
}

func (c *benchScaleCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	stopProfile, err := benchCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	res, err := c.run(ctx)
	stopProfile()
	if err != nil {
		return err
	}
	if c.JSON {
		return benchPrintJSON(res)
	}
	c.printTable(res)
	return nil
}

func (c *benchScaleCmd) run(ctx context.Context) (*scaleBenchResult, error) {
	log, err := trialLog(c.LogLevel)
	if err != nil {
		return nil, err
	}
	res := &scaleBenchResult{
		EpisodesPerS: map[string]float64{}, EnvStepsPerS: map[string]float64{}, Speedup: map[string]float64{},
		TrainerBusy: map[string]float64{}, Runs: map[string]*trialResult{}, Eta: c.Eta,
		Workload: scaleWorkload{Tasks: c.Tasks, Episodes: c.Episodes, WarmupBatches: c.Warmup, ConcurrencyEach: c.Concurrency,
			GroupSize: c.GroupSize, BatchSize: c.BatchSize, Epochs: c.Epochs, EnvHosts: c.EnvHosts, Seed: c.Seed,
			LatencyMedianMS: benchMillis(c.LatencyMedian), LatencyP99MS: benchMillis(c.LatencyP99)},
	}
	if !c.JSON {
		fmt.Fprintf(os.Stderr, "bench scale: %s, %d episodes per count after %d warm-up batches, %d episodes at once per replica, %d env hosts, step latency median %v p99 %v\n",
			strings.Join(c.Tasks, ","), c.Episodes, c.Warmup, c.Concurrency, c.EnvHosts, c.LatencyMedian, c.LatencyP99)
	}
	for _, n := range c.Replicas {
		if !c.JSON {
			fmt.Fprintf(os.Stderr, "%d rollout replica(s)...\n", n)
		}
		r, err := runTrial(ctx, c.trial(n), log)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", n, err)
		}
		k := strconv.Itoa(n)
		res.Runs[k] = r
		res.EpisodesPerS[k], res.EnvStepsPerS[k], res.TrainerBusy[k] = r.EpisodesPerS, r.EnvStepsPerS, r.TrainerBusy
		res.MaxStaleness = max(res.MaxStaleness, r.MaxStaleness)
	}
	if base := res.EpisodesPerS[strconv.Itoa(c.Replicas[0])]; base > 0 {
		for _, n := range c.Replicas {
			k := strconv.Itoa(n)
			res.Speedup[k] = res.EpisodesPerS[k] / base
		}
	}
	return res, nil
}

func (c *benchScaleCmd) printTable(res *scaleBenchResult) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "rollout replicas\tepisodes at once\ttrained episodes/s\tvs %d\tenv steps/s\tepisodes\tseconds\ttrainer busy\tmax staleness\tdropped stale\n", c.Replicas[0])
	for _, n := range c.Replicas {
		k := strconv.Itoa(n)
		r := res.Runs[k]
		fmt.Fprintf(w, "%d\t%d\t%.1f\t%.2fx\t%.0f\t%d\t%.1f\t%.1f%%\t%d\t%d\n", n, n*c.Concurrency, r.EpisodesPerS, res.Speedup[k],
			r.EnvStepsPerS, r.Episodes, r.Seconds, 100*r.TrainerBusy, r.MaxStaleness, r.DroppedStale)
	}
	_ = w.Flush()
}
