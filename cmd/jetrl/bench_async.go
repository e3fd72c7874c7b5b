package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/report"
	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/rs/zerolog"
	"gonum.org/v1/gonum/stat/distuv"
)

// benchAsyncCmd runs the same long-tailed workload twice in one process, each time on a fresh embedded
// server: synchronously (eta 0), then asynchronously (eta --eta), and compares trained episodes per second.
//
// The workload: the db, kg and webshop families, whose episode lengths under the untrained policy run from
// 1 to 20 turns (uniformly random play on 500 training instances: db 1–15 turns, median 2; kg 3–15, median
// 15; webshop 3–20, median 12), and every env step delayed by a lognormal draw with median 20 ms and p99
// 400 ms (sigma = ln(20)/2.326), so an episode's duration is long-tailed twice over.
//
// Synchronous is the mesh with eta 0: a rollout may start (v+1)·B episodes in all at trainer version v, so it
// plays exactly one batch per version and then waits; the replay-buffer releases that batch only when its
// slowest episode is in (batches are capped at B, so no batch takes more); the trainer trains it and
// publishes version v+1; only then does rollout, once it has loaded those weights, start the next batch.
// That is the paper's synchronous baseline: roll out, wait for the slowest, train, push weights, repeat.
// Both modes use the same concurrency (default B: synchronous fills every slot at the start of a batch),
// batch size (exactly B per batch), trainer (PPO epochs, objective) and seed. The trainer's objective is
// AReaL's decoupled one by default, which on fresh (synchronous) data is plain PPO; its epochs are what
// makes the trainer, rather than the staleness bound, the limit of the asynchronous mode on two cores.
type benchAsyncCmd struct {
	Tasks         []string      `name:"tasks" default:"db,kg,webshop" help:"Task families of the workload."`
	Episodes      int64         `name:"episodes" default:"23040" help:"Trained episodes measured per mode (after the warm-up)."`
	Warmup        int64         `name:"warmup" default:"2" help:"Batches trained before the measurement starts."`
	GroupSize     int           `name:"group-size" default:"8" help:"GRPO group size G."`
	BatchSize     int           `name:"batch-size" default:"256" help:"Batch size B in episodes (every batch holds exactly B)."`
	Concurrency   int           `name:"concurrency" default:"0" help:"Most episodes played at once, in both modes (0: the batch size B; synchronous never plays more than B)."`
	Eta           int           `name:"eta" default:"2" help:"Staleness bound of the asynchronous mode."`
	MaxQueued     int           `name:"max-queued" default:"1" help:"Most batches released and not yet applied, in both modes (1: the next batch is composed when the trainer takes one, so none goes stale in its queue; negative: no bound)."`
	Lead          time.Duration `name:"lead" default:"250ms" help:"The replay-buffer composes the next batch this long before the trainer's step is expected to end, although --max-queued batches are queued, in both modes, so the trainer finds it waiting (0: off)."`
	Cut           float64       `name:"cut" default:"0" help:"The replay-buffer takes a group still playing when the last batch that can take it is composed, without the members still playing, once this share of it has arrived, in both modes (0: off; the group then goes stale whole)."`
	TurnStale     bool          `name:"turn-staleness" help:"Apply the staleness bound to each turn, by the version that produced it, in both modes (the synchronous mode's turns are all current): a late episode trains its turns within the bound, and its group's members with none count in the baseline only."`
	StopStale     bool          `name:"stop-stale" help:"The rollout stops playing an episode once no batch can take it (the replay-buffer composed the last batch that could, or the trainer passed its admission version by more than the bound), in both modes; ignored with --turn-staleness."`
	Epochs        int           `name:"epochs" default:"0" help:"PPO epochs per batch: the trainer's work per batch, in both modes (0: raised in asynchronous calibration runs until the trainer is --calibration-busy busy)."`
	CalBusy       float64       `name:"calibration-busy" default:"0.97" help:"With --epochs 0: the trainer busy fraction the calibration aims for in the asynchronous mode."`
	CalEpochs     int           `name:"calibration-epochs" default:"4" help:"With --epochs 0: the epochs of the first calibration run."`
	CalBatches    int64         `name:"calibration-batches" default:"0" help:"With --epochs 0: the batches each calibration and check run measures, centred on the window's middle (0: the whole window, measured as the asynchronous mode measures it, without the evaluation)."`
	Recalibrate   bool          `name:"recalibrate" default:"true" negatable:"" help:"With --epochs 0: before each pair after the first, check the epochs in an asynchronous run: raise them if the trainer was under 96% busy, lower them if its update took 25% longer per turn than in the calibration's chosen run (the machine's speed moves; see README)."`
	LR            float64       `name:"lr" default:"0.0035" help:"The trainer's Adam learning rate in both modes, whatever the epochs: the rate per step sets how fast both modes learn (README: 0.0015 learned slowly, 0.0067 stalled the asynchronous mode on kg)."`
	LREpochs      int           `name:"lr-epochs" default:"0" help:"If above 0, the learning rate is instead the default rate 0.01 times this over the epochs, so each batch moves the policy about as far as this many epochs at 0.01 do."`
	Correction    string        `name:"correction" enum:"none,decoupled,truncated" default:"truncated" help:"Off-policy correction of the trainer in both modes (as jetrl up --correction; decoupled and truncated equal none on fresh data)."`
	ISCap         float64       `name:"is-cap" default:"2" help:"Importance weight cap of --correction truncated."`
	LatencyMedian time.Duration `name:"latency-median" default:"20ms" help:"Median of the lognormal env step latency."`
	LatencyP99    time.Duration `name:"latency-p99" default:"400ms" help:"99th percentile of the lognormal env step latency."`
	EnvHosts      int           `name:"env-hosts" default:"1" help:"Env hosts."`
	EvalEpisodes  int           `name:"eval-episodes" default:"200" help:"Held-out episodes per task after the measured episodes (0: no evaluation)."`
	HeldOutPoints int           `name:"heldout-points" default:"3" help:"Held-out success is also measured at the window's start and after each of this many equal parts of it (the learning curve; 1: at its end only)."`
	Seed          uint64        `name:"seed" default:"1" help:"Seed of the policy, instances, latency draws and evaluation."`
	Seeds         int           `name:"seeds" default:"1" help:"Pairs of runs (both modes each), with seeds --seed, --seed+1, ...; the summary is the mean over pairs."`
	Timeout       time.Duration `name:"timeout" default:"30m" help:"Give up a mode after this long."`
	JSON          bool          `name:"json" help:"Print one JSON object instead of a table (progress still goes to stderr)."`
	Quiet         bool          `name:"quiet" help:"No progress on stderr."`
	LogLevel      string        `name:"log-level" default:"error" help:"Level of the services' log on stderr."`
	CPUProfile    string        `name:"cpuprofile" help:"Write a CPU profile of both modes to this file (go tool pprof)."`
	From          []string      `name:"from" type:"existingfile" help:"Instead of running, pool the pairs of these earlier runs' --json output (their workloads must agree but for the seed, and for the epochs when each run calibrated its own) and print their summary over all pairs."`
	Versus        []string      `name:"versus" type:"existingfile" help:"With --from: pool these runs too (the same workload, but for --eta, --max-queued, --lead, --cut, --turn-staleness, --stop-stale, --correction or --is-cap if they differ) and compare their async - sync held-out with --from's, at the end of the window and along it: over every pair, and paired by the seeds both pools hold once (two binaries alternated on the same seeds)."`
	// policyBits, if set, shrinks the policy (log2 of its weights) for the smoke tests; not a flag.
	policyBits int
	// progress, if set, takes the progress lines instead of stderr (the smoke tests read them); not a flag.
	progress io.Writer
}

// asyncBenchResult is what bench async-vs-sync prints with --json.
type asyncBenchResult struct {
	SyncEpisodesPerS  float64          `json:"sync_episodes_per_s"`
	AsyncEpisodesPerS float64          `json:"async_episodes_per_s"`
	Speedup           float64          `json:"speedup"`
	TrainerBusySync   float64          `json:"trainer_busy_sync"`
	TrainerBusyAsync  float64          `json:"trainer_busy_async"`
	MaxStaleness      int64            `json:"max_staleness"`
	Eta               int              `json:"eta"`
	StalenessHist     map[string]int64 `json:"staleness_histogram"`
	HeldOutSync       float64          `json:"heldout_success_sync"`
	HeldOutAsync      float64          `json:"heldout_success_async"`
	// With --seeds above 1: the top-level figures are means over the pairs (max_staleness the largest,
	// the histogram summed), the std of held-out success over pairs, and every pair in full.
	HeldOutSyncStd  float64 `json:"heldout_success_sync_std"`
	HeldOutAsyncStd float64 `json:"heldout_success_async_std"`
	// HeldOutDiff is async minus sync held-out success per pair: its mean, sample std, and the two-sided
	// 95% confidence interval of the mean (Student's t, n-1 degrees of freedom), from the paired runs.
	HeldOutDiffMean float64     `json:"heldout_diff_mean"`
	HeldOutDiffStd  float64     `json:"heldout_diff_std"`
	HeldOutDiffCI95 *[2]float64 `json:"heldout_diff_ci95,omitempty"`
	// HeldOutByTask is each mode's end-of-window held-out success per task, mean over the pairs.
	HeldOutByTaskSync  map[string]float64 `json:"heldout_by_task_sync,omitempty"`
	HeldOutByTaskAsync map[string]float64 `json:"heldout_by_task_async,omitempty"`
	// HeldOutCurve* (with a curve: --heldout-points above 1 and an evaluation) are each mode's held-out
	// curve's mean over its points after the window's start (area under the learning curve, as a success
	// rate), mean over the pairs, and the mean and 95% interval of its async-minus-sync paired differences.
	HeldOutCurveSync     *float64    `json:"heldout_curve_sync,omitempty"`
	HeldOutCurveAsync    *float64    `json:"heldout_curve_async,omitempty"`
	HeldOutCurveDiffMean *float64    `json:"heldout_curve_diff_mean,omitempty"`
	HeldOutCurveDiffCI95 *[2]float64 `json:"heldout_curve_diff_ci95,omitempty"`
	// HeldOutLag reads the asynchronous curve as the synchronous one delayed (nil without curves of one
	// number of points in every pair).
	HeldOutLag *heldOutLag `json:"heldout_lag,omitempty"`
	// HeldOutRuns, when pairs were pooled from two runs or more (--from), compares the runs' async - sync
	// held-out differences: each run's mean, and whether the runs' means spread more than their pairs' spread
	// within each run predicts (a run-level cause: a change of code or machine between them).
	HeldOutRuns *heldOutRuns `json:"heldout_runs,omitempty"`
	// Versus, with --versus, compares the --versus runs' held-out differences with these (--from's).
	Versus *heldOutVersus `json:"versus,omitempty"`
	Pairs  []*asyncPair   `json:"pairs"`
	// Sync and Async are the first pair's details.
	Sync     *trialResult  `json:"sync"`
	Async    *trialResult  `json:"async"`
	Workload asyncWorkload `json:"workload"`
}

// asyncPair is one seed's run of both modes.
type asyncPair struct {
	Seed uint64 `json:"seed"`
	// Epochs are the trainer's PPO epochs per batch in this pair's runs.
	Epochs int `json:"epochs"`
	// Recalibration is the asynchronous runs that checked the epochs before this pair (--recalibrate;
	// none before the first pair, which follows the calibration).
	Recalibration []asyncCalibRun `json:"recalibration,omitempty"`
	Speedup       float64         `json:"speedup"`
	// PaceRatio is the asynchronous mode's trainer update time per trained turn and epoch over the
	// synchronous mode's (trialResult.UpdatePace): well above its usual value, a little under 1 (the
	// asynchronous mode trains fewer long episodes, whose later turns cost more), the machine ran the
	// trainer slower in the asynchronous mode, whose rate is the trainer's, than in the synchronous one
	// (0 when a mode lacks it).
	PaceRatio    float64 `json:"pace_ratio"`
	HeldOutSync  float64 `json:"heldout_success_sync"`
	HeldOutAsync float64 `json:"heldout_success_async"`
	// HeldOutCurve* is each mode's held-out curve's mean over its points after the window's start (nil
	// without a curve).
	HeldOutCurveSync  *float64     `json:"heldout_curve_sync,omitempty"`
	HeldOutCurveAsync *float64     `json:"heldout_curve_async,omitempty"`
	Sync              *trialResult `json:"sync"`
	Async             *trialResult `json:"async"`
}

// curveMean is the mean held-out success of t's curve after its first point (the window's start), or
// NaN without a curve.
func curveMean(t *trialResult) float64 {
	if len(t.HeldOutCurve) < 2 {
		return math.NaN()
	}
	var sum float64
	for _, p := range t.HeldOutCurve[1:] {
		sum += p.Success
	}
	return sum / float64(len(t.HeldOutCurve)-1)
}

// asyncWorkload records the settings both modes ran with.
type asyncWorkload struct {
	Tasks           []string `json:"tasks"`
	Episodes        int64    `json:"episodes"`
	WarmupBatches   int64    `json:"warmup_batches"`
	GroupSize       int      `json:"group_size"`
	BatchSize       int      `json:"batch_size"`
	MaxQueued       int      `json:"max_queued"`
	LeadMS          float64  `json:"lead_ms"`
	Cut             float64  `json:"cut"`
	TurnStaleness   bool     `json:"turn_staleness"`
	StopStale       bool     `json:"stop_stale"`
	HeldOutPoints   int      `json:"heldout_points"`
	Concurrency     int      `json:"concurrency"`
	Epochs          int      `json:"epochs"`
	LearningRate    float64  `json:"learning_rate"`
	LREpochs        int      `json:"lr_epochs"`
	Correction      string   `json:"correction"`
	ISCap           float64  `json:"is_cap"`
	LatencyMedianMS float64  `json:"latency_median_ms"`
	LatencyP99MS    float64  `json:"latency_p99_ms"`
	LatencyMeanMS   float64  `json:"latency_mean_ms"`
	EnvHosts        int      `json:"env_hosts"`
	EvalEpisodes    int      `json:"eval_episodes"`
	Seed            uint64   `json:"seed"`
	// Calibration is how the epochs were chosen (absent when --epochs was given, and when pooled).
	Calibration *asyncCalibration `json:"calibration,omitempty"`
	// PooledFrom names the files whose pairs were pooled (--from); Epochs and LearningRate are then 0 when
	// the pairs' epochs differ (each pair has its own).
	PooledFrom []string `json:"pooled_from,omitempty"`
	// Calibrated says that every run pooled calibrated its own epochs (their Calibration is in their own
	// files), so the pooled output pools again with calibrated runs whatever their epochs.
	Calibrated bool `json:"calibrated,omitempty"`
}

// asyncCalibration is how the trainer's epochs were chosen. On two CPU cores the trainer's work per batch is
// a free parameter of the workload (on GPUs it is the model's size), and the machine's speed moves it
// against the env latencies, which are fixed: so it is set to the regime the benchmark is about, the one
// where the asynchronous mode's trainer is the limit, as a GPU-bound trainer is. Asynchronous runs
// (the window without the evaluation, or --calibration-batches around its middle) start at --calibration-epochs
// and raise the epochs until the trainer is TargetBusy busy; the first epochs that reach it are chosen.
// The trainer's busy fraction levels off below 100% (its version pushes and the wait for a batch's last
// group remain), and on a fast machine below the target: when a run is no busier than the one before it
// (Plateau), raising the epochs further would only slow both modes, so the calibration stops and chooses
// the fewest epochs within calibrateNearBusiest of the busiest run and at least calibrateMinBusy busy
// (the busiest run when none is).
// The synchronous mode, with the same trainer, still waits for each batch's slowest episode: whether the
// asynchronous mode is then 3x faster, and learns as well, is what the benchmark measures.
type asyncCalibration struct {
	TargetBusy   float64         `json:"target_busy"`
	Runs         []asyncCalibRun `json:"runs"`
	ChosenEpochs int             `json:"chosen_epochs"`
	Reached      bool            `json:"reached"`
	Plateau      bool            `json:"plateau"`
	// RecalibrateBelow (with --recalibrate) is the trainer busy fraction under which a pair's check
	// raises the epochs (recalibrateBelow).
	RecalibrateBelow float64 `json:"recalibrate_below,omitempty"`
	// RecalibrateSlower (with --recalibrate) is how much more trainer work per turn a busy check's epochs
	// take than the chosen run's before the check lowers them (recalibrateSlower).
	RecalibrateSlower float64 `json:"recalibrate_slower,omitempty"`
}

// asyncCalibRun is one calibration or check run.
type asyncCalibRun struct {
	// Seed is the run's: --seed for the calibration, the pair's own for a check before it.
	Seed                  uint64  `json:"seed"`
	Epochs                int     `json:"epochs"`
	Batches               int64   `json:"batches"`
	SecondsPerBatch       float64 `json:"seconds_per_batch"`
	UpdateSecondsPerBatch float64 `json:"update_seconds_per_batch"`
	TrainerBusy           float64 `json:"trainer_busy"`
	// UpdatePace is the trainer's update time per trained turn and epoch, µs (trialResult.UpdatePace).
	UpdatePace float64 `json:"update_us_per_turn_epoch,omitempty"`
}

func (c *benchAsyncCmd) Validate() error {
	var errs []error
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("--tasks is empty"))
	}
	if c.Episodes < 1 || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--episodes %d must be at least 1 and --warmup %d not negative", c.Episodes, c.Warmup))
	}
	if c.GroupSize < 2 || c.BatchSize < c.GroupSize || c.BatchSize%c.GroupSize != 0 {
		errs = append(errs, fmt.Errorf("--batch-size %d must be a multiple of --group-size %d (at least 2)", c.BatchSize, c.GroupSize))
	}
	if c.Concurrency != 0 && c.Concurrency < c.GroupSize {
		errs = append(errs, fmt.Errorf("--concurrency %d must be at least the group size %d", c.Concurrency, c.GroupSize))
	}
	if c.Eta < 1 {
		errs = append(errs, fmt.Errorf("--eta %d: the asynchronous mode needs at least 1", c.Eta))
	}
	if c.Correction == trainer.CorrectionTruncated && c.ISCap < 1 {
		errs = append(errs, fmt.Errorf("--is-cap %v must be at least 1", c.ISCap))
	}
	if c.LREpochs < 0 {
		errs = append(errs, fmt.Errorf("--lr-epochs %d must not be negative", c.LREpochs))
	}
	if !(c.LR > 0 && c.LR < 1) {
		errs = append(errs, fmt.Errorf("--lr %v must be in (0, 1)", c.LR))
	}
	if c.Lead < 0 || c.Lead > time.Minute || (c.Lead > 0 && c.MaxQueued < 1) {
		errs = append(errs, fmt.Errorf("--lead %v must be in [0, 1m], and above 0 only with --max-queued at least 1 (not %d)", c.Lead, c.MaxQueued))
	}
	if !(c.Cut >= 0 && c.Cut <= 1) {
		errs = append(errs, fmt.Errorf("--cut %v must be a share in [0, 1]", c.Cut))
	}
	if len(c.Versus) > 0 && len(c.From) == 0 {
		errs = append(errs, errors.New("--versus compares with the runs of --from, which is missing"))
	}
	if c.Seeds < 1 {
		errs = append(errs, fmt.Errorf("--seeds %d must be at least 1", c.Seeds))
	}
	if c.HeldOutPoints < 1 || int64(c.HeldOutPoints) > c.Episodes {
		errs = append(errs, fmt.Errorf("--heldout-points %d must be at least 1 and at most --episodes", c.HeldOutPoints))
	}
	if c.Epochs < 0 || c.EnvHosts < 1 || c.EvalEpisodes < 0 {
		errs = append(errs, errors.New("--epochs must not be negative, --env-hosts at least 1, --eval-episodes not negative"))
	}
	if c.Epochs == 0 && (c.CalEpochs < 1 || c.CalEpochs > calibrateMaxEpochs || !(c.CalBusy > 0 && c.CalBusy < 1)) {
		errs = append(errs, fmt.Errorf("--epochs 0 needs --calibration-epochs %d in [1, %d] and --calibration-busy %v in (0, 1)", c.CalEpochs, calibrateMaxEpochs, c.CalBusy))
	}
	if c.BatchSize > 0 && (c.CalBatches < 0 || c.CalBatches > c.Episodes/int64(c.BatchSize)) {
		errs = append(errs, fmt.Errorf("--calibration-batches %d must be in [0, %d], the window's batches", c.CalBatches, c.Episodes/int64(c.BatchSize)))
	}
	if _, err := c.latency().StepLatency(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// concurrency is the episodes played at once in both modes.
func (c *benchAsyncCmd) concurrency() int {
	if c.Concurrency == 0 {
		return c.BatchSize
	}
	return c.Concurrency
}

// learningRate is the trainer's Adam learning rate at c.Epochs: --lr, or with --lr-epochs the default
// rate scaled by it over the epochs.
func (c *benchAsyncCmd) learningRate() float64 {
	if c.LREpochs == 0 || c.Epochs == 0 {
		return c.LR
	}
	return policy.DefaultLR * float64(c.LREpochs) / float64(c.Epochs)
}

func (c *benchAsyncCmd) latency() env.LatencyConfig {
	return env.LatencyConfig{Median: c.LatencyMedian, P99: c.LatencyP99, Seed: c.Seed}
}

// trial is one mode's run: the same workload, trainer and resources, with staleness bound eta.
func (c *benchAsyncCmd) trial(eta int) trialConfig {
	tcfg := trainer.DefaultConfig()
	tcfg.Model.Seed = int64(c.Seed)
	tcfg.Model.Bits = c.policyBits
	tcfg.Epochs = c.Epochs
	tcfg.Adam.LR = c.learningRate()
	tcfg.Loss.Correction, tcfg.Loss.ISCap = c.Correction, c.ISCap
	return trialConfig{
		Mesh: mesh.Config{
			Tasks: c.Tasks, Seed: c.Seed, GroupSize: c.GroupSize, BatchSize: c.BatchSize, MaxBatchSize: c.BatchSize, MaxQueued: c.MaxQueued, Lead: c.Lead, Cut: c.Cut, TurnStaleness: c.TurnStale, StopStale: c.StopStale, Eta: eta,
			EnvHosts: c.EnvHosts, Rollouts: 1, Trainer: tcfg, Normalizer: normalizer.DefaultConfig(),
			// A fixed replica id: the groups' instances follow --seed (the rollout draws them from its seed
			// and id), the same sequence in both modes.
			Rollout: rollout.Config{ID: "bench", Concurrency: c.concurrency()},
		},
		Latency: c.latency(), WarmupBatches: c.Warmup, Episodes: c.Episodes,
		EvalEpisodes: c.EvalEpisodes, EvalSeed: c.Seed + 1, HeldOutPoints: c.HeldOutPoints, Timeout: c.Timeout,
	}
}

func (c *benchAsyncCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	if len(c.From) > 0 {
		res, err := poolAsyncResults(c.From)
		if err != nil {
			return err
		}
		if len(c.Versus) > 0 {
			if res.Versus, err = poolVersus(c.From, c.Versus, res); err != nil {
				return err
			}
		}
		if c.JSON {
			return benchPrintJSON(res)
		}
		pc := *c // the table shows the pooled runs' settings, not this command's flags
		pc.Eta, pc.TurnStale, pc.HeldOutPoints = res.Eta, res.Workload.TurnStaleness, res.Workload.HeldOutPoints
		pc.printTable(res)
		printVersus(res.Versus, len(res.Pairs))
		return nil
	}
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

func (c *benchAsyncCmd) run(ctx context.Context) (*asyncBenchResult, error) {
	log, err := trialLog(c.LogLevel)
	if err != nil {
		return nil, err
	}
	say := func(format string, args ...any) {
		if c.Quiet {
			return
		}
		w := c.progress
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, format+"\n", args...)
	}
	lat, err := env.NewLognormal(c.LatencyMedian, c.LatencyP99, c.Seed)
	if err != nil {
		return nil, err
	}
	res := &asyncBenchResult{Eta: c.Eta, Workload: asyncWorkload{
		Tasks: c.Tasks, Episodes: c.Episodes, WarmupBatches: c.Warmup, GroupSize: c.GroupSize, BatchSize: c.BatchSize,
		MaxQueued: c.MaxQueued, LeadMS: benchMillis(c.Lead), Cut: c.Cut, TurnStaleness: c.TurnStale, StopStale: c.StopStale && !c.TurnStale, HeldOutPoints: c.HeldOutPoints, Concurrency: c.concurrency(), Correction: c.Correction, ISCap: c.ISCap, EnvHosts: c.EnvHosts, EvalEpisodes: c.EvalEpisodes, Seed: c.Seed,
		LatencyMedianMS: benchMillis(c.LatencyMedian), LatencyP99MS: benchMillis(c.LatencyP99), LatencyMeanMS: benchMillis(lat.Mean()),
	}}
	say("bench async-vs-sync: %s, %d episodes per mode after %d warm-up batches, B=%d, %d episodes at once, step latency median %v p99 %v",
		strings.Join(c.Tasks, ","), c.Episodes, c.Warmup, c.BatchSize, c.concurrency(), c.LatencyMedian, c.LatencyP99)
	cc := *c // the chosen epochs go in this copy, not in the caller's flags
	c = &cc
	if c.Epochs == 0 {
		cal, err := c.calibrate(ctx, log, say)
		if err != nil {
			return nil, fmt.Errorf("calibration: %w", err)
		}
		if c.Recalibrate {
			cal.RecalibrateBelow, cal.RecalibrateSlower = recalibrateBelow, recalibrateSlower
		}
		c.Epochs, res.Workload.Calibration = cal.ChosenEpochs, cal
	}
	res.Workload.Epochs, res.Workload.LearningRate, res.Workload.LREpochs = c.Epochs, c.learningRate(), c.LREpochs
	epochs := c.Epochs
	for i := range c.Seeds {
		pc := *c
		pc.Seed = c.Seed + uint64(i)
		p := &asyncPair{Seed: pc.Seed}
		if i > 0 && res.Workload.Calibration != nil && c.Recalibrate {
			// On the pair's own seed: the instances, episode lengths and latency draws its asynchronous
			// mode plays next, so the check differs from it only by the machine's speed.
			if p.Recalibration, epochs, err = pc.recalibrate(ctx, epochs, res.Workload.Calibration.chosenRun(), log, say); err != nil {
				return nil, fmt.Errorf("recalibration before seed %d: %w", pc.Seed, err)
			}
		}
		pc.Epochs, p.Epochs = epochs, epochs
		// The asynchronous mode first, right after the calibration that chose its epochs: the trainer's
		// busy fraction is the one figure that depends on the machine's speed staying put in between.
		say("seed %d: asynchronous (eta %d, %d epochs)...", pc.Seed, c.Eta, epochs)
		if p.Async, err = runTrial(ctx, pc.trial(c.Eta), log); err != nil {
			return nil, fmt.Errorf("asynchronous mode, seed %d: %w", pc.Seed, err)
		}
		say("seed %d: synchronous (eta 0, %d epochs)...", pc.Seed, epochs)
		if p.Sync, err = runTrial(ctx, pc.trial(0), log); err != nil {
			return nil, fmt.Errorf("synchronous mode, seed %d: %w", pc.Seed, err)
		}
		res.Pairs = append(res.Pairs, p)
		say("%s", pairProgress(p))
	}
	if slices.ContainsFunc(res.Pairs, func(p *asyncPair) bool { return p.Epochs != c.Epochs }) {
		res.Workload.Epochs = 0 // the pairs ran at their own epochs (--recalibrate)
		if c.LREpochs > 0 {
			res.Workload.LearningRate = 0 // and their own learning rates
		}
	}
	if err := res.summarize(); err != nil {
		return nil, err
	}
	return res, nil
}

// summarize sets res's figures over its pairs from the pairs' trials: the pairs' own figures (speedup,
// held-out success, curve means) and the summary over pairs.
func (res *asyncBenchResult) summarize() error {
	if len(res.Pairs) == 0 {
		return errors.New("no pairs")
	}
	res.SyncEpisodesPerS, res.AsyncEpisodesPerS, res.Speedup, res.TrainerBusySync, res.TrainerBusyAsync, res.MaxStaleness = 0, 0, 0, 0, 0, 0
	res.StalenessHist = map[string]int64{}
	res.HeldOutByTaskSync, res.HeldOutByTaskAsync = map[string]float64{}, map[string]float64{}
	res.HeldOutCurveSync, res.HeldOutCurveAsync, res.HeldOutCurveDiffMean, res.HeldOutCurveDiffCI95, res.HeldOutDiffCI95 = nil, nil, nil, nil, nil
	var heldSync, heldAsync, curveSync, curveAsync []float64
	n := float64(len(res.Pairs))
	for _, p := range res.Pairs {
		if p.Sync == nil || p.Async == nil {
			return fmt.Errorf("seed %d: the pair lacks a mode's trial", p.Seed)
		}
		p.Speedup, p.PaceRatio, p.HeldOutCurveSync, p.HeldOutCurveAsync = pairSpeedup(p), pairPaceRatio(p), nil, nil
		p.HeldOutSync, p.HeldOutAsync = p.Sync.HeldOutSuccess, p.Async.HeldOutSuccess
		if cs, ca := curveMean(p.Sync), curveMean(p.Async); !math.IsNaN(cs) && !math.IsNaN(ca) {
			p.HeldOutCurveSync, p.HeldOutCurveAsync = &cs, &ca
			curveSync, curveAsync = append(curveSync, cs), append(curveAsync, ca)
		}
		res.SyncEpisodesPerS += p.Sync.EpisodesPerS / n
		res.AsyncEpisodesPerS += p.Async.EpisodesPerS / n
		res.Speedup += p.Speedup / n
		res.TrainerBusySync += p.Sync.TrainerBusy / n
		res.TrainerBusyAsync += p.Async.TrainerBusy / n
		res.MaxStaleness = max(res.MaxStaleness, p.Sync.MaxStaleness, p.Async.MaxStaleness)
		for k, v := range trialHistMap(p.Async.Staleness) {
			res.StalenessHist[k] += v
		}
		heldSync, heldAsync = append(heldSync, p.HeldOutSync), append(heldAsync, p.HeldOutAsync)
		for task, r := range p.Sync.HeldOut {
			res.HeldOutByTaskSync[task] += r.Success / n
		}
		for task, r := range p.Async.HeldOut {
			res.HeldOutByTaskAsync[task] += r.Success / n
		}
	}
	if len(curveSync) == len(res.Pairs) && len(curveSync) > 0 {
		d, cs, ca := pairedDiffs(curveSync, curveAsync)
		mean, _, ci := pairedInterval(d)
		res.HeldOutCurveSync, res.HeldOutCurveAsync, res.HeldOutCurveDiffMean = &cs, &ca, &mean
		if len(d) > 1 {
			res.HeldOutCurveDiffCI95 = &ci
		}
	}
	res.HeldOutLag = heldOutLagOf(res.Pairs, res.Workload.BatchSize)
	syncStat, err := report.NewStat(heldSync)
	if err != nil {
		return fmt.Errorf("held-out success of the synchronous mode: %w", err)
	}
	asyncStat, err := report.NewStat(heldAsync)
	if err != nil {
		return fmt.Errorf("held-out success of the asynchronous mode: %w", err)
	}
	res.HeldOutSync, res.HeldOutSyncStd = syncStat.Mean, syncStat.Std
	res.HeldOutAsync, res.HeldOutAsyncStd = asyncStat.Mean, asyncStat.Std
	diffs := make([]float64, len(heldSync))
	for i := range diffs {
		diffs[i] = heldAsync[i] - heldSync[i]
	}
	mean, std, ci := pairedInterval(diffs)
	res.HeldOutDiffMean, res.HeldOutDiffStd = mean, std
	if len(diffs) > 1 && !math.IsNaN(mean) {
		res.HeldOutDiffCI95 = &ci
	}
	res.Sync, res.Async = res.Pairs[0].Sync, res.Pairs[0].Async
	return nil
}

// A calibration run measures the window as the asynchronous mode does (see calibrationWarmup). Batches
// around the window's middle alone (--calibration-batches) have episodes about as long as the window's on
// the mean (the untrained policy's are longer, the trained one's shorter, and the update's time grows with
// the turns in a batch), but the busy fraction levels off near 100% while the episodes shorten: busy at the
// middle read 98-100% where the whole window read 93-94% (README). At most calibrateRuns runs; at most
// calibrateMaxEpochs epochs.
const (
	calibrateRuns      = 5
	calibrateMaxEpochs = 32
	// A run less than calibratePlateauGain busier than the one before it with fewer epochs ends the
	// calibration at a plateau, if that one was at least calibrateMinBusy busy: lower, the machine's speed
	// moving between two runs (by up to 1.4x in a minute) can make the one with more epochs the less busy.
	calibratePlateauGain = 0.005
	// At a plateau, or when the target was not reached, the fewest epochs within calibrateNearBusiest of
	// the busiest run are chosen, but none under calibrateMinBusy (the trainer-busy target of the async
	// mode) while a run reached it: below it the busiest run is chosen.
	calibrateNearBusiest = 0.01
	calibrateMinBusy     = 0.95
)

// plateaued reports whether the last run was less than calibratePlateauGain busier than the one before,
// which was at least calibrateMinBusy busy.
func plateaued(runs []asyncCalibRun) bool {
	n := len(runs)
	return n >= 2 && runs[n-2].TrainerBusy >= calibrateMinBusy && runs[n-1].TrainerBusy < runs[n-2].TrainerBusy+calibratePlateauGain
}

// chooseEpochs returns the fewest epochs of the runs within calibrateNearBusiest of the busiest and at
// least calibrateMinBusy busy; when no run is that busy, the busiest run's epochs.
func chooseEpochs(runs []asyncCalibRun) int {
	busiest := 0.0
	for _, r := range runs {
		busiest = max(busiest, r.TrainerBusy)
	}
	floor := busiest
	if busiest >= calibrateMinBusy {
		floor = max(busiest-calibrateNearBusiest, calibrateMinBusy)
	}
	fewest := 0
	for _, r := range runs {
		if r.TrainerBusy >= floor && (fewest == 0 || r.Epochs < fewest) {
			fewest = r.Epochs
		}
	}
	return fewest
}

// calibrate chooses the trainer's epochs (see asyncCalibration). Below the target the trainer waits for
// data and its busy fraction grows with its work, but less than in proportion as it nears the target (the
// wait for a batch's slowest groups remains), so the next run's epochs scale with the square of the
// shortfall, at most doubling and at least an eighth more (nextEpochs).
func (c *benchAsyncCmd) calibrate(ctx context.Context, log zerolog.Logger, say func(string, ...any)) (*asyncCalibration, error) {
	cal := &asyncCalibration{TargetBusy: c.CalBusy}
	e := c.CalEpochs
	for range calibrateRuns {
		r, err := c.calibrationRun(ctx, e, log, say)
		if err != nil {
			return nil, err
		}
		cal.Runs = append(cal.Runs, r)
		cal.ChosenEpochs = e
		if r.TrainerBusy >= c.CalBusy {
			cal.Reached = true
			break
		}
		cal.ChosenEpochs = chooseEpochs(cal.Runs)
		if cal.Plateau = plateaued(cal.Runs); cal.Plateau {
			say("calibration: a plateau (%.1f%% at %d epochs after %.1f%% at %d)", 100*r.TrainerBusy, e,
				100*cal.Runs[len(cal.Runs)-2].TrainerBusy, cal.Runs[len(cal.Runs)-2].Epochs)
			break
		}
		if e == calibrateMaxEpochs {
			break
		}
		e = nextEpochs(e, r.TrainerBusy, c.CalBusy)
	}
	return cal, nil
}

// calibrationRun is one asynchronous run at e epochs without the evaluation: the window, or
// --calibration-batches around its middle.
func (c *benchAsyncCmd) calibrationRun(ctx context.Context, e int, log zerolog.Logger, say func(string, ...any)) (asyncCalibRun, error) {
	say("calibration: asynchronous, seed %d, %d epochs...", c.Seed, e)
	pc := *c
	pc.Epochs = e
	tc := pc.trial(c.Eta)
	tc.WarmupBatches, tc.Episodes, tc.EvalEpisodes, tc.HeldOutPoints = c.calibrationWarmup(), c.calibrationEpisodes(), 0, 0
	r, err := runTrial(ctx, tc, log)
	if err != nil {
		return asyncCalibRun{}, err
	}
	if r.Batches < 1 || r.Seconds <= 0 || !(r.TrainerBusy > 0) {
		return asyncCalibRun{}, fmt.Errorf("the run at %d epochs measured %d batches in %.2f s, the trainer %v busy", e, r.Batches, r.Seconds, r.TrainerBusy)
	}
	say("calibration: %d epochs: %.2f s per batch, trainer busy %.1f%%, update %.1f µs per trained turn and epoch", e, r.BatchSeconds, 100*r.TrainerBusy, r.UpdatePace)
	return asyncCalibRun{Seed: c.Seed, Epochs: e, Batches: r.Batches, SecondsPerBatch: r.BatchSeconds,
		UpdateSecondsPerBatch: r.TrainerUpdate * r.BatchSeconds, TrainerBusy: r.TrainerBusy, UpdatePace: r.UpdatePace}, nil
}

// recalibrateBelow is the trainer busy fraction under which a pair's check raises the epochs. It is below
// the calibration's target: between the two, more epochs gain little busy time (near the plateau) and
// cost both modes speed, and a check reads a few points either side of the pair's own figure.
// recalibrateSlower is how much more update time per trained turn a busy check's epochs take than the
// calibration's chosen run did (its epochs times its update pace) before the check tries fewer epochs.
const (
	recalibrateBelow  = 0.96
	recalibrateSlower = 1.25
	recalibrateRuns   = 2
)

// recalibrate checks e, the epochs of the pair before, in a calibration run on c's seed (the next pair's).
// The trainer's work per batch is CPU time and the env's latencies are wall time, so the epochs that keep
// the trainer busy move with the machine's speed:
//   - sped up since the calibration, the trainer waits for data. Under recalibrateBelow busy the check
//     raises the epochs as the calibration does (nextEpochs, aimed at --calibration-busy) and runs again;
//   - slowed down, the trainer is busy but each batch takes longer, and the asynchronous mode, whose rate
//     is the trainer's, loses against the synchronous one, which waits for the env either way. When a
//     busy check's update pace times its epochs is recalibrateSlower past the calibration's chosen run's
//     (ref), it runs again at the epochs that take the chosen run's update time per turn at the check's
//     pace (lowerEpochs).
//
// At most recalibrateRuns runs in all; a second run under recalibrateBelow busy leaves the choice to
// chooseEpochs over both, as in the calibration.
func (c *benchAsyncCmd) recalibrate(ctx context.Context, e int, ref asyncCalibRun, log zerolog.Logger, say func(string, ...any)) ([]asyncCalibRun, int, error) {
	var runs []asyncCalibRun
	for range recalibrateRuns {
		r, err := c.calibrationRun(ctx, e, log, say)
		if err != nil {
			return runs, 0, err
		}
		runs = append(runs, r)
		if r.TrainerBusy >= recalibrateBelow {
			lower := lowerEpochs(e, r.UpdatePace, ref)
			if lower == e || len(runs) == recalibrateRuns {
				return runs, e, nil
			}
			say("check: %.1f µs per trained turn and epoch at %d epochs against %.1f at the calibration's %d: %d epochs",
				r.UpdatePace, e, ref.UpdatePace, ref.Epochs, lower)
			e = lower
			continue
		}
		if len(runs) > 1 && runs[0].TrainerBusy >= recalibrateBelow {
			break // fewer epochs than the first check left the trainer waiting: the first check's stand
		}
		if e == calibrateMaxEpochs {
			break
		}
		e = nextEpochs(e, r.TrainerBusy, c.CalBusy)
	}
	return runs, chooseEpochs(runs), nil
}

// lowerEpochs returns the epochs that take ref's trainer work per trained turn (its epochs times its update
// pace) at a check's pace, when e epochs at that pace take more than recalibrateSlower times it, and e
// otherwise (also when either pace is unknown). The result is rounded up and at least one.
func lowerEpochs(e int, pace float64, ref asyncCalibRun) int {
	if !(pace > 0) || !(ref.UpdatePace > 0) || ref.Epochs < 1 {
		return e
	}
	work := float64(ref.Epochs) * ref.UpdatePace
	if float64(e)*pace <= recalibrateSlower*work {
		return e
	}
	return min(e, max(1, int(math.Ceil(work/pace))))
}

// chosenRun is the calibration run at its chosen epochs (the last such), the reference of the checks
// before the pairs (recalibrate); the zero run when there is none.
func (cal *asyncCalibration) chosenRun() asyncCalibRun {
	for i := len(cal.Runs) - 1; i >= 0; i-- {
		if cal.Runs[i].Epochs == cal.ChosenEpochs {
			return cal.Runs[i]
		}
	}
	return asyncCalibRun{}
}

// nextEpochs is the epochs of the calibration run after one at e epochs that kept the trainer busy the
// fraction busy, short of target: e times the square of the shortfall, at most 2e and calibrateMaxEpochs,
// and at least an eighth more than e (and one more). Near the target the busy fraction grows slowly with
// the epochs, so the square alone steps by one epoch at a time there and calibrateRuns can end short of it.
func nextEpochs(e int, busy, target float64) int {
	short := target / busy
	next := int(math.Ceil(float64(e) * short * short))
	step := max(e+1, int(math.Ceil(float64(e)*9/8)))
	return min(max(next, step), 2*e, calibrateMaxEpochs)
}

// calibrationWarmup is the batches a calibration run trains before the ones it measures: --warmup, as the
// asynchronous mode, when it measures the whole window; with --calibration-batches, so many that they are
// centred on the measured window's middle batch (--warmup plus half the window's batches).
func (c *benchAsyncCmd) calibrationWarmup() int64 {
	if c.CalBatches == 0 {
		return c.Warmup
	}
	return c.Warmup + c.Episodes/int64(2*c.BatchSize) - c.CalBatches/2 // at least --warmup: Validate bounds CalBatches by the window
}

// calibrationEpisodes is the episodes a calibration run measures: the window's, or --calibration-batches'.
func (c *benchAsyncCmd) calibrationEpisodes() int64 {
	if c.CalBatches == 0 {
		return c.Episodes
	}
	return c.CalBatches * int64(c.BatchSize)
}

// pairedInterval returns the mean and sample std of paired differences and the two-sided 95% confidence
// interval of their mean (Student's t with n-1 degrees of freedom); with one pair the interval is the
// whole line.
func pairedInterval(d []float64) (mean, std float64, ci [2]float64) {
	st, err := report.NewStat(d)
	if err != nil {
		return math.NaN(), math.NaN(), [2]float64{math.NaN(), math.NaN()}
	}
	if st.N < 2 {
		return st.Mean, 0, [2]float64{math.Inf(-1), math.Inf(1)}
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(st.N - 1)}.Quantile(0.975)
	half := t * st.Std / math.Sqrt(float64(st.N))
	return st.Mean, st.Std, [2]float64{st.Mean - half, st.Mean + half}
}

// pairedDiffs is b[i] - a[i] for each i, with the means of a and b.
func pairedDiffs(a, b []float64) (d []float64, meanA, meanB float64) {
	d = make([]float64, len(a))
	for i := range d {
		d[i] = b[i] - a[i]
		meanA, meanB = meanA+a[i]/float64(len(d)), meanB+b[i]/float64(len(d))
	}
	return d, meanA, meanB
}

func benchMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (c *benchAsyncCmd) printTable(res *asyncBenchResult) {
	if cal := res.Workload.Calibration; cal != nil {
		verdict := "the first that reached it"
		switch {
		case cal.Plateau:
			verdict = fmt.Sprintf("a plateau below it; the fewest within %.0f point of the busiest", 100*calibrateNearBusiest)
		case !cal.Reached:
			verdict = fmt.Sprintf("not reached; the fewest within %.0f point of the busiest", 100*calibrateNearBusiest)
		}
		lr := fmt.Sprintf("learning rate %.4g", res.Workload.LearningRate)
		if res.Workload.LearningRate == 0 {
			lr = "learning rate by the epochs (--lr-epochs)"
		}
		fmt.Printf("calibration (asynchronous, trainer busy aimed at %.0f%%): %s; %d epochs per batch (%s), %s\n",
			100*cal.TargetBusy, calibRunsString(cal.Runs), cal.ChosenEpochs, verdict, lr)
	} else if from := res.Workload.PooledFrom; len(from) > 0 {
		fmt.Printf("%d pairs pooled from %d runs (%s)\n", len(res.Pairs), len(from), strings.Join(from, ", "))
	} else {
		fmt.Printf("%d epochs per batch (given), learning rate %.4g\n", res.Workload.Epochs, res.Workload.LearningRate)
	}
	for _, p := range res.Pairs {
		switch {
		case len(p.Recalibration) > 0:
			fmt.Printf("seed %d, %d epochs per batch (checked before the pair: %s)\n", p.Seed, p.Epochs, calibRunsString(p.Recalibration))
		case len(res.Workload.PooledFrom) > 0 || res.Workload.Epochs == 0:
			fmt.Printf("seed %d, %d epochs per batch\n", p.Seed, p.Epochs)
		case len(res.Pairs) > 1:
			fmt.Printf("seed %d\n", p.Seed)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "mode\teta\ttrained episodes/s\tenv steps/s\tepisodes\tseconds\ts/batch (trainer)\ttrainer busy (update)\tstaleness histogram (episodes)\tmax staleness\theld-out success\n")
		for _, r := range []struct {
			name string
			eta  int
			t    *trialResult
		}{{"sync", 0, p.Sync}, {"async", c.Eta, p.Async}} {
			fmt.Fprintf(w, "%s\t%d\t%.1f\t%.0f\t%d\t%.1f\t%.2f (%.2f)\t%.1f%% (%.1f%%)\t%s\t%d\t%s\n", r.name, r.eta, r.t.EpisodesPerS, r.t.EnvStepsPerS,
				r.t.Episodes, r.t.Seconds, r.t.BatchSeconds, r.t.BusyPerBatch, 100*r.t.TrainerBusy, 100*r.t.TrainerUpdate, trialHistString(r.t.Staleness), r.t.MaxStaleness, trialHeldOutString(r.t))
		}
		_ = w.Flush()
		fmt.Printf("speedup async/sync: %.2fx; held-out success after %d (sync) and %d (async) trained episodes: sync %.1f%%, async %.1f%%\n",
			p.Speedup, p.Sync.EpisodesTrained, p.Async.EpisodesTrained, 100*p.HeldOutSync, 100*p.HeldOutAsync)
		if p.PaceRatio > 0 {
			fmt.Printf("trainer update per trained turn and epoch: sync %.1f µs (%d turns), async %.1f µs (%d turns), async/sync %.2f\n",
				p.Sync.UpdatePace, p.Sync.TrainedTurns, p.Async.UpdatePace, p.Async.TrainedTurns, p.PaceRatio)
		}
		fmt.Printf("episodes dropped as too stale: sync %d, async %d%s; cut while playing: sync %d, async %d; infrastructure failures: sync %d, async %d\n",
			p.Sync.DroppedStale, p.Async.DroppedStale, staleByTaskString(p.Async.DroppedStaleByTask), p.Sync.CutPlaying, p.Async.CutPlaying, p.Sync.InfraFailures, p.Async.InfraFailures)
		if p.Async.StoppedStale > 0 || p.Sync.StoppedStale > 0 {
			fmt.Printf("stale episodes stopped while playing (among the drops): sync %d, async %d, after %d and %d turns\n",
				p.Sync.StoppedStale, p.Async.StoppedStale, p.Sync.StoppedStaleTurns, p.Async.StoppedStaleTurns)
		}
		if c.TurnStale {
			fmt.Printf("by turn: async stale members carried for their group's baseline %d, turns older than the bound left out of trained episodes %d\n",
				p.Async.StaleInBaseline, p.Async.StaleTurns)
		}
		if len(p.Async.TrainedSuccessByTask) > 0 {
			fmt.Printf("success of trained episodes: sync %s, async %s; of async stale drops: %s\n",
				shareByTaskString(p.Sync.TrainedSuccessByTask), shareByTaskString(p.Async.TrainedSuccessByTask), shareByTaskString(p.Async.StaleSuccessByTask))
			fmt.Printf("groups with mixed outcomes: trained sync %s, async %s; async stale drops: %s\n",
				shareByTaskString(p.Sync.TrainedMixedByTask), shareByTaskString(p.Async.TrainedMixedByTask), shareByTaskString(p.Async.StaleMixedByTask))
		}
		if p.HeldOutCurveSync != nil && p.HeldOutCurveAsync != nil {
			fmt.Printf("held-out along the window (trained episodes: success): sync %s; async %s; mean after the start: sync %.1f%%, async %.1f%%\n",
				curveString(p.Sync.HeldOutCurve), curveString(p.Async.HeldOutCurve), 100**p.HeldOutCurveSync, 100**p.HeldOutCurveAsync)
		}
	}
	if len(res.Pairs) < 2 {
		return
	}
	diffs := make([]string, len(res.Pairs))
	minSpeed, minBusy := math.Inf(1), math.Inf(1)
	var paces []string
	for i, p := range res.Pairs {
		diffs[i] = fmt.Sprintf("%+.1f", 100*(p.HeldOutAsync-p.HeldOutSync))
		minSpeed, minBusy = min(minSpeed, p.Speedup), min(minBusy, p.Async.TrainerBusy)
		if p.PaceRatio > 0 {
			paces = append(paces, fmt.Sprintf("%.2f", p.PaceRatio))
		}
	}
	fmt.Printf("over %d pairs (seeds %s): speedup %.2fx (lowest %.2fx); trainer busy async %.1f%% (lowest %.1f%%); max staleness %d; "+
		"held-out success sync %.1f ± %.1f%%, async %.1f ± %.1f%%; async - sync per pair: %s points, mean %+.1f, 95%% interval [%+.1f, %+.1f]\n",
		len(res.Pairs), pairSeedsString(res.Pairs), res.Speedup, minSpeed, 100*res.TrainerBusyAsync, 100*minBusy,
		res.MaxStaleness, 100*res.HeldOutSync, 100*res.HeldOutSyncStd, 100*res.HeldOutAsync, 100*res.HeldOutAsyncStd, strings.Join(diffs, ", "),
		100*res.HeldOutDiffMean, 100*res.HeldOutDiffCI95[0], 100*res.HeldOutDiffCI95[1]) // set with two pairs or more, as here
	if r := res.HeldOutRuns; r != nil {
		parts := make([]string, len(r.Runs))
		for i, run := range r.Runs {
			parts[i] = fmt.Sprintf("%s %+.1f (%d)", filepath.Base(run.From), 100*run.Mean, run.Pairs)
			if run.CurveMean != nil {
				parts[i] = fmt.Sprintf("%s %+.1f, along the window %+.1f (%d)", filepath.Base(run.From), 100*run.Mean, 100**run.CurveMean, run.Pairs)
			}
		}
		curve := ""
		if r.CurveF != nil {
			curve = fmt.Sprintf("; along the window F(%d, %d) = %.2f, p = %.2f", r.DF1, r.DF2, *r.CurveF, *r.CurveP)
		}
		fmt.Printf("async - sync held-out by run (mean, pairs): %s; between runs F(%d, %d) = %.2f, p = %.2f%s (p is the chance of so large an F if the runs differed by chance alone)\n",
			strings.Join(parts, ", "), r.DF1, r.DF2, r.F, r.P, curve)
	}
	if len(paces) == len(res.Pairs) {
		fmt.Printf("trainer update per trained turn and epoch, async/sync per pair (the machine's speed between the modes): %s\n", strings.Join(paces, ", "))
	}
	if tasks := slices.Sorted(maps.Keys(res.HeldOutByTaskSync)); len(tasks) > 0 {
		parts := make([]string, len(tasks))
		for i, t := range tasks {
			parts[i] = fmt.Sprintf("%s sync %.1f%% async %.1f%%", t, 100*res.HeldOutByTaskSync[t], 100*res.HeldOutByTaskAsync[t])
		}
		fmt.Printf("held-out success by family (end of window, mean over pairs): %s\n", strings.Join(parts, ", "))
	}
	if ci := res.HeldOutCurveDiffCI95; ci != nil { // set only when every pair has a curve
		cd := make([]string, len(res.Pairs))
		for i, p := range res.Pairs {
			cd[i] = fmt.Sprintf("%+.1f", 100*(*p.HeldOutCurveAsync-*p.HeldOutCurveSync))
		}
		fmt.Printf("held-out along the window (mean of its %d points after the start): sync %.1f%%, async %.1f%%; async - sync per pair: %s points, mean %+.1f, 95%% interval [%+.1f, %+.1f]\n",
			c.HeldOutPoints, 100**res.HeldOutCurveSync, 100**res.HeldOutCurveAsync, strings.Join(cd, ", "), 100**res.HeldOutCurveDiffMean, 100*ci[0], 100*ci[1])
	}
	if l := res.HeldOutLag; l != nil {
		fmt.Println(l.String(res.Eta))
	}
}

// calibRunsString shows calibration runs as "4 epochs 56.0%, 8 epochs 96.7%".
func calibRunsString(runs []asyncCalibRun) string {
	s := make([]string, len(runs))
	for i, r := range runs {
		s[i] = fmt.Sprintf("%d epochs %.1f%%", r.Epochs, 100*r.TrainerBusy)
	}
	return strings.Join(s, ", ")
}

// pairSeedsString shows the pairs' seeds as "first-last" when they run one by one from the first, as one
// run's do, or else each in turn.
func pairSeedsString(pairs []*asyncPair) string {
	seeds := make([]string, len(pairs))
	consecutive := true
	for i, p := range pairs {
		seeds[i] = strconv.FormatUint(p.Seed, 10)
		consecutive = consecutive && p.Seed == pairs[0].Seed+uint64(i)
	}
	if consecutive {
		return seeds[0] + "-" + seeds[len(seeds)-1]
	}
	return strings.Join(seeds, ", ")
}

// curveString shows a held-out curve as "512: 41.2%, 3072: 50.1%, ...".
func curveString(c []heldOutPoint) string {
	parts := make([]string, len(c))
	for i, p := range c {
		parts[i] = fmt.Sprintf("%d: %.1f%%", p.EpisodesTrained, 100*p.Success)
	}
	return strings.Join(parts, ", ")
}

// staleByTaskString shows the replay-buffer's stale drops per task, " (replay-buffer: db 3, kg 40)", or
// nothing when it dropped none.
func staleByTaskString(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	return " (replay-buffer: " + byTaskString(m, func(n int64) string { return fmt.Sprint(n) }) + ")"
}

// shareByTaskString shows a share per family, sorted by name.
func shareByTaskString(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	return byTaskString(m, func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) })
}

// byTaskString lists "family value" per family, sorted by name.
func byTaskString[V any](m map[string]V, format func(V) string) string {
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " " + format(m[n])
	}
	return strings.Join(parts, ", ")
}

// trialHeldOutString shows the mean held-out success and each task's.
func trialHeldOutString(t *trialResult) string {
	if len(t.HeldOut) == 0 {
		return "-"
	}
	names := make([]string, 0, len(t.HeldOut))
	for n := range t.HeldOut {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f%%", n, 100*t.HeldOut[n].Success)
	}
	return fmt.Sprintf("%.1f%% (%s)", 100*t.HeldOutSuccess, strings.Join(parts, ", "))
}

// pairProgress is the progress line of a finished pair: its figures as the table gives them, so a long
// run shows them as it goes.
func pairProgress(p *asyncPair) string {
	return fmt.Sprintf("seed %d: %d epochs, async %.1f vs sync %.1f trained episodes/s (%.2fx), trainer busy async %.1f%%, max staleness %d, %d stale drops, held-out %.1f%% vs %.1f%% (%+.1f)",
		p.Seed, p.Epochs, p.Async.EpisodesPerS, p.Sync.EpisodesPerS, pairSpeedup(p), 100*p.Async.TrainerBusy,
		max(p.Async.MaxStaleness, p.Sync.MaxStaleness), p.Async.DroppedStale,
		100*p.Async.HeldOutSuccess, 100*p.Sync.HeldOutSuccess, 100*(p.Async.HeldOutSuccess-p.Sync.HeldOutSuccess)) +
		fmt.Sprintf(", trainer update per turn and epoch async/sync %.2f", pairPaceRatio(p))
}

// pairPaceRatio is a pair's asynchronous over synchronous trainer update time per trained turn and epoch
// (0 without both).
func pairPaceRatio(p *asyncPair) float64 {
	if p.Async.UpdatePace > 0 && p.Sync.UpdatePace > 0 {
		return p.Async.UpdatePace / p.Sync.UpdatePace
	}
	return 0
}

// pairSpeedup is a pair's asynchronous over synchronous trained episodes/s (0 without a synchronous rate).
func pairSpeedup(p *asyncPair) float64 {
	if p.Sync.EpisodesPerS > 0 {
		return p.Async.EpisodesPerS / p.Sync.EpisodesPerS
	}
	return 0
}
