package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/metrics"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

type upCmd struct {
	Config       kong.ConfigFlag    `name:"config" type:"existingfile" help:"YAML file of settings (keys are these flags' names); flags on the command line override it."`
	Tasks        []string           `name:"tasks" default:"alfworld" help:"Task families to train on, comma separated."`
	TaskWeights  map[string]float64 `name:"task-weights" mapsep:"," help:"Share of rollout groups per task, e.g. alfworld=2,os=2 (default 1 each)."`
	Minutes      float64            `name:"minutes" default:"4" help:"Training time budget."`
	Seed         uint64             `name:"seed" default:"1" help:"Seed of the policy, instance draws and evaluation."`
	Out          string             `name:"out" default:"out/run" help:"Output folder."`
	NATS         string             `name:"nats" help:"Use this NATS server instead of an embedded one."`
	Fresh        bool               `name:"fresh" default:"true" negatable:"" help:"Start from scratch (delete the data of an earlier run)."`
	GroupSize    int                `name:"group-size" default:"8" help:"GRPO group size G."`
	BatchSize    int                `name:"batch-size" default:"64" help:"Batch size B in episodes."`
	Eta          int                `name:"eta" default:"2" help:"Staleness bound (0: synchronous)."`
	Rollouts     int                `name:"rollouts" default:"1" help:"Rollout replicas."`
	EnvHosts     int                `name:"env-hosts" default:"1" help:"Env hosts."`
	Concurrency  int                `name:"concurrency" default:"64" help:"Episodes each rollout replica plays at once."`
	StaleProb    float64            `name:"stale-prob" default:"0.25" help:"Cross-policy sampling: probability a turn uses the stale copy (0: off)."`
	LR           float64            `name:"lr" default:"0" help:"Adam learning rate (0: the model's default)."`
	Epochs       int                `name:"epochs" default:"2" help:"PPO epochs per batch."`
	Adaptive     bool               `name:"adaptive-tasks" default:"true" negatable:"" help:"Scale each task's share of groups by what its groups still teach: the larger of the recent share of its groups whose rewards differ and its mean reward's shortfall from 1 (floor 0.1)."`
	TaskSalt     bool               `name:"task-salt" help:"Key the policy's candidate features by task, so families trained together share no weights."`
	MaxBatchSize int                `name:"max-batch-size" default:"0" help:"Most episodes in a batch when more groups are ready (0: twice the batch size)."`
	MaxQueued    int                `name:"max-queued" default:"2" help:"Most batches released by the replay-buffer and not yet applied by the trainer (negative: no bound)."`
	Lead         time.Duration      `name:"lead" default:"0s" help:"Compose the next batch this long before the trainer's step is expected to end, although --max-queued batches are queued (0: off)."`
	Cut          float64            `name:"cut" default:"0" help:"When the last batch that can take a group still playing is composed, take the group without the members still playing once this share of it has arrived (0: off; the group then goes stale whole)."`
	TurnStale    bool               `name:"turn-staleness" help:"Apply the staleness bound to each turn, by the version that produced it: a late episode trains its turns within the bound, and its group's members with none count in the baseline only."`
	StopStale    bool               `name:"stop-stale" help:"Rollouts stop playing an episode once no batch can take it (the replay-buffer composed the last batch that could, or the trainer passed its admission version by more than --eta); ignored with --turn-staleness. Off by default: see README."`
	PoolCkpt     string             `name:"pool-checkpoint" type:"existingfile" help:"Saved weights (another run's weights.bin) that join the rollout policy pool as a fixed member."`
	PoolCkptProb float64            `name:"pool-checkpoint-prob" default:"0.1" help:"Probability a turn uses --pool-checkpoint."`
	StaleEvery   int64              `name:"stale-every" default:"25" help:"Cross-policy sampling: refresh the stale copy every this many versions."`
	Clip         float64            `name:"clip" default:"0.2" help:"PPO clip ε."`
	DualClip     float64            `name:"dual-clip" default:"3" help:"Dual clip c for negative advantages (0: off)."`
	KLCoef       float64            `name:"kl-coef" default:"0" help:"KL penalty to the initial policy (k3 estimator; 0: off)."`
	EntropyCoef  float64            `name:"entropy-coef" default:"0.01" help:"Entropy bonus (0: off)."`
	TrapEntropy  float64            `name:"trap-entropy-coef" default:"0" help:"Extra entropy bonus on the answer turn of groups that all failed, in a family that won at least half its episodes in the batch (0: off)."`
	Correction   string             `name:"correction" enum:"none,decoupled,truncated" default:"none" help:"Off-policy correction: none, decoupled (AReaL's proximal objective) or truncated (importance weights capped at --is-cap)."`
	ISCap        float64            `name:"is-cap" default:"2" help:"Importance weight cap of --correction truncated."`
	TaskNorm     bool               `name:"task-norm" default:"true" negatable:"" help:"Task advantage normalization."`
	AbnormalRew  float64            `name:"abnormal-reward" default:"-0.2" help:"Reward of episodes the agent ended abnormally (turn limit, invalid output)."`
	FlatGroup    float64            `name:"flat-group-coef" default:"0.5" help:"Advantage of a group whose rewards are all equal: this times (reward - its task's mean reward in the batch) (0: zero, plain GRPO)."`
	EvalEpisodes int                `name:"eval-episodes" default:"200" help:"Held-out episodes per task for the before/after evaluation."`
	EvalEvery    time.Duration      `name:"eval-every" default:"30s" help:"Held-out evaluation period during training (0: off)."`
	Target       float64            `name:"target" default:"0" help:"Stop early once held-out success reaches this on every task (0: never)."`
	LogLevel     string             `name:"log-level" default:"info" help:"Level of the log written to <out>/jetrl.log."`
	MetricsAddr  string             `name:"metrics-addr" default:"127.0.0.1:9090" help:"Serve every service's Prometheus metrics on /metrics here (empty: off)."`
	Quiet        bool               `name:"quiet" help:"No progress display."`
	CPUProfile   string             `name:"cpu-profile" type:"path" help:"Write a CPU profile of the training phase here (go tool pprof)."`
}

func (c *upCmd) Validate() error {
	var errs []error
	if c.Minutes <= 0 {
		errs = append(errs, fmt.Errorf("--minutes %v must be positive", c.Minutes))
	}
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("--tasks is empty"))
	}
	if c.EvalEpisodes < 1 {
		errs = append(errs, fmt.Errorf("--eval-episodes %d must be at least 1", c.EvalEpisodes))
	}
	if c.Target < 0 || c.Target > 1 {
		errs = append(errs, fmt.Errorf("--target %v must be in [0, 1]", c.Target))
	}
	// serviceChecks covers --pool-checkpoint-prob too, through the rollout's own validation.
	if err := serviceChecks(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *upCmd) Run(g *globals) error {
	// A first interrupt ends training early: the policy as it is then is evaluated and written, marked
	// interrupted. A second one gives up at once.
	interrupt, ctx, stop := twoSignalContexts()
	defer stop()
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(c.Out, runout.LogFile))
	if err != nil {
		return err
	}
	defer logf.Close()
	log, err := logging.New("jetrl", c.LogLevel, false, logf)
	if err != nil {
		return err
	}
	url := c.NATS
	// The services of an embedded server's mesh reach it in-process: no socket, no system call per message.
	var dial []nats.Option
	if url == "" {
		dir := filepath.Join(c.Out, "nats")
		if c.Fresh {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
		srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url, dial = srv.URL(), []nats.Option{srv.InProcess()}
	}
	admin, err := bus.Connect(ctx, url, "jetrl-up", log, dial...)
	if err != nil {
		return err
	}
	defer admin.Close()
	js, err := bus.JetStream(admin)
	if err != nil {
		return err
	}
	if c.Fresh && c.NATS != "" {
		if err := bus.ResetTopology(ctx, js); err != nil {
			return err
		}
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	if _, _, err := metrics.Serve(ctx, c.MetricsAddr, reg); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	tcfg := trainer.DefaultConfig()
	tcfg.Model.Seed = int64(c.Seed)
	tcfg.Model.TaskSalt = c.TaskSalt
	tcfg.Epochs = c.Epochs
	tcfg.Adam.LR = c.LR
	tcfg.Loss = trainer.Objective{Clip: c.Clip, DualClip: c.DualClip, KLCoef: c.KLCoef, EntropyCoef: c.EntropyCoef, TrapEntropyCoef: c.TrapEntropy, Correction: c.Correction, ISCap: c.ISCap}
	rcfg := rollout.Config{Concurrency: c.Concurrency, StaleEvery: c.StaleEvery, AdaptiveTasks: c.Adaptive}
	if c.PoolCkpt != "" {
		name, version, err := storePoolCheckpoint(ctx, js, c.PoolCkpt)
		if err != nil {
			return err
		}
		rcfg.CheckpointObject, rcfg.CheckpointProb = name, c.PoolCkptProb
		log.Info().Str("file", c.PoolCkpt).Str("object", name).Int64("version", version).Msg("checkpoint joins the policy pool")
	}
	if err := c.recordSettings(ctx, js, rcfg.CheckpointObject); err != nil {
		return err
	}
	m, err := mesh.Start(ctx, mesh.Config{
		NATSURL: url, Dial: dial, Tasks: c.Tasks, TaskWeights: c.TaskWeights, Seed: c.Seed, GroupSize: c.GroupSize, BatchSize: c.BatchSize, Eta: c.Eta,
		EnvHosts: c.EnvHosts, Rollouts: c.Rollouts, StaleProb: c.StaleProb,
		Trainer: tcfg, Normalizer: normalizer.Config{AbnormalReward: c.AbnormalRew, TaskNorm: c.TaskNorm, FlatGroupCoef: c.FlatGroup}, MaxBatchSize: c.MaxBatchSize, MaxQueued: c.MaxQueued, Lead: c.Lead, Cut: c.Cut, TurnStaleness: c.TurnStale, StopStale: c.StopStale,
		Rollout: rcfg,
		Log:     log, Metrics: reg,
	})
	if err != nil {
		return err
	}
	defer m.Stop()
	if err := m.WaitVersion(ctx, 0); err != nil {
		return err
	}
	env := envclient.New(admin, envclient.Config{})
	defer func() { _ = env.Close() }()
	say := func(format string, args ...any) {
		if !c.Quiet {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	say("jetrl up: tasks %s, %v minutes, out %s (log: %s)", strings.Join(c.Tasks, ","), c.Minutes, c.Out, filepath.Join(c.Out, runout.LogFile))
	say("NATS at %s (jetrl status --nats %s)", url, url)
	log.Info().Str("nats", url).Msg("mesh up")
	say("evaluating the untrained policy on %d held-out episodes per task...", c.EvalEpisodes)
	before, _, err := evalCurrent(ctx, js, env, c.Tasks, c.EvalEpisodes, c.Seed)
	if err != nil {
		return fmt.Errorf("evaluate untrained policy: %w", err)
	}
	if interrupt.Err() != nil {
		return errors.New("interrupted before training started")
	}
	metrics, err := runout.OpenMetrics(c.Out)
	if err != nil {
		return err
	}
	defer metrics.Close()
	if err := metrics.Add(evalPoint(0, 0, 0, before)); err != nil {
		return err
	}

	steps := make(chan *nats.Msg, 1024)
	sub, err := admin.ChanSubscribe(proto.SubjectEventTrainStep, steps)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()

	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	if err := m.StartRollouts(ctx); err != nil {
		return err
	}
	budget := time.Duration(c.Minutes * float64(time.Minute))
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	progress := newProgress(budget, c.Quiet)
	evals := &periodicEvals{metrics: metrics, progress: progress, log: log}
	var evalTick <-chan time.Time
	if c.EvalEvery > 0 {
		t := time.NewTicker(c.EvalEvery)
		defer t.Stop()
		evalTick = t.C
	}
	evalDone := make(chan evalOutcome, 1)
	evalBusy := false
	recent := map[string]*ema{}
	trainedByTask := map[string]int64{}
	reached := false
loop:
	for {
		select {
		case <-interrupt.Done():
			say("\ninterrupted: stopping training, then evaluating and writing the policy as it is (interrupt again to give up)")
			break loop
		case <-deadline.C:
			break loop
		case msg := <-steps:
			var ev proto.TrainStep
			if codec.Unmarshal(msg.Data, &ev) != nil {
				continue
			}
			p := runout.Point{Kind: "train", Seconds: time.Since(start).Seconds(), Version: ev.Version, EpisodesTrained: ev.EpisodesTrained,
				Loss: ev.Loss, ClipFraction: ev.ClipFraction, MaxStaleness: ev.MaxStaleness, Tasks: map[string]runout.TaskPoint{}}
			for t, st := range ev.Tasks {
				trainedByTask[t] += int64(st.Episodes)
				p.Tasks[t] = runout.TaskPoint{Success: float64(st.Successes) / float64(max(st.Episodes, 1)), MeanReward: st.MeanReward, Episodes: st.Episodes}
				if recent[t] == nil {
					recent[t] = &ema{}
				}
				recent[t].add(p.Tasks[t].Success)
			}
			if err := metrics.Add(p); err != nil {
				return err
			}
			progress.update(time.Since(start), ev.Version, ev.EpisodesTrained, recent)
		case <-evalTick:
			if evalBusy {
				continue
			}
			evalBusy = true
			go func(at time.Duration) {
				res, loaded, err := evalCurrent(ctx, js, env, c.Tasks, max(c.EvalEpisodes/2, 20), c.Seed+1)
				evalDone <- evalOutcome{res, loaded.Version, at, err}
			}(time.Since(start))
		case o := <-evalDone:
			evalBusy = false
			ok, err := evals.record(o, m.Trainer.Stats().EpisodesTrained)
			if err != nil {
				return err
			}
			if ok && c.Target > 0 && allAtLeast(o.res, c.Target) {
				reached = true
				break loop
			}
		}
	}
	wall := time.Since(start)
	progress.finish()
	if evalBusy {
		<-evalDone
	}
	m.StopRollouts()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if reached {
		say("held-out success reached %.0f%% on every task after %s", 100*c.Target, wall.Round(time.Second))
	}
	say("evaluating the trained policy on %d held-out episodes per task...", c.EvalEpisodes)
	after, finalModel, err := evalCurrent(ctx, js, env, c.Tasks, c.EvalEpisodes, c.Seed)
	if err != nil {
		return fmt.Errorf("evaluate trained policy: %w", err)
	}
	tstats, bstats := m.Trainer.Stats(), m.Buffer.Stats()
	if err := metrics.Add(evalPoint(wall.Seconds(), finalModel.Version, tstats.EpisodesTrained, after)); err != nil {
		return err
	}
	var infra int64
	for _, r := range m.Rollouts {
		infra += r.Status().InfraFailures
	}
	sum := runout.Summary{
		Tasks: map[string]runout.TaskSummary{}, EpisodesTrained: tstats.EpisodesTrained, PolicyVersion: tstats.Version,
		WallSeconds: wall.Seconds(), InfraFailures: infra, EvalsDone: evals.done, EvalsFailed: evals.failed, Seed: c.Seed,
		Staleness:   runout.Staleness{Eta: c.Eta, MaxObserved: max(tstats.MaxStaleness, bstats.MaxStaleness), DroppedEpisodes: bstats.DroppedStale + tstats.StaleDropped, CutEpisodes: bstats.Cut},
		Config:      effectiveSettings(c),
		Interrupted: interrupt.Err() != nil,
	}
	for _, t := range c.Tasks {
		sum.Tasks[t] = runout.TaskSummary{
			HeldoutSuccessBefore: before[t].Success, HeldoutSuccessAfter: after[t].Success,
			HeldoutMeanRewardBefore: before[t].MeanReward, HeldoutMeanRewardAfter: after[t].MeanReward,
			EvalEpisodes: after[t].Episodes, EpisodesTrained: trainedByTask[t],
		}
	}
	w, err := finalModel.Model.MarshalBinary()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Out, runout.WeightsFile), w, 0o644); err != nil {
		return err
	}
	if err := runout.WriteJSON(c.Out, runout.SummaryFile, sum); err != nil {
		return err
	}
	if err := runout.Plot(filepath.Join(c.Out, runout.PlotFile), metrics.Points()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Print(runout.Table(sum.Tasks))
	fmt.Printf("trained %d episodes to policy version %d in %s; max staleness %d (eta %d), %d stale episodes dropped\n",
		sum.EpisodesTrained, sum.PolicyVersion, wall.Round(time.Second), sum.Staleness.MaxObserved, c.Eta, sum.Staleness.DroppedEpisodes)
	if evals.failed > 0 {
		fmt.Printf("%d of %d held-out evaluations during training failed (see %s)\n", evals.failed, evals.failed+evals.done,
			filepath.Join(c.Out, runout.LogFile))
	}
	if sum.Interrupted {
		fmt.Printf("interrupted after %s of %s: the results are those of the policy at that point\n", wall.Round(time.Second), budget)
	}
	fmt.Printf("wrote %s, %s, %s, %s\n", filepath.Join(c.Out, runout.SummaryFile), filepath.Join(c.Out, runout.MetricsFile),
		filepath.Join(c.Out, runout.PlotFile), filepath.Join(c.Out, runout.WeightsFile))
	m.Stop()
	return m.Err()
}

// recordSettings writes the settings in force to <out>/config.yaml (loadable again with --config) and to
// the run bucket in KV, where every service and `jetrl status` read them.
// The KV record also names the stored pool checkpoint (if any) for rollout processes, whose --checkpoint
// is an object name rather than a file.
func (c *upCmd) recordSettings(ctx context.Context, js jetstream.JetStream, checkpointObject string) error {
	settings := effectiveSettings(c)
	y, err := settingsYAML(settings)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Out, runout.ConfigFile), y, 0o644); err != nil {
		return err
	}
	if checkpointObject != "" {
		settings["checkpoint"], settings["checkpoint_prob"] = checkpointObject, c.PoolCkptProb
	}
	j, err := settingsJSON(settings)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		return fmt.Errorf("kv %s: %w", proto.BucketRun, err)
	}
	_, err = kv.Put(ctx, proto.KeyRunConfig, j)
	return err
}

// storePoolCheckpoint puts saved weights into the weights Object Store under a name derived from their
// checksum, with the version they had in their run when a summary.json beside them says so.
func storePoolCheckpoint(ctx context.Context, js jetstream.JetStream, file string) (string, int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", 0, err
	}
	if _, err := policy.Load(b); err != nil {
		return "", 0, fmt.Errorf("--pool-checkpoint %s: %w", file, err)
	}
	var version int64
	if s, err := runout.ReadSummary(filepath.Dir(file)); err == nil {
		version = s.PolicyVersion
	}
	sum := sha256.Sum256(b)
	name := "pool/" + hex.EncodeToString(sum[:8])
	obj, err := js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		return "", 0, err
	}
	meta := jetstream.ObjectMeta{Name: name, Description: file, Metadata: map[string]string{rollout.CheckpointVersionKey: strconv.FormatInt(version, 10)}}
	if _, err := obj.Put(ctx, meta, bytes.NewReader(b)); err != nil {
		return "", 0, fmt.Errorf("store --pool-checkpoint: %w", err)
	}
	return name, version, nil
}

type evalOutcome struct {
	res     map[string]rollout.EvalResult
	version int64
	at      time.Duration
	err     error
}

// evalCurrent evaluates the published policy greedily on held-out instances.
func evalCurrent(ctx context.Context, js jetstream.JetStream, env *envclient.Client, tasks []string, n int, seed uint64) (map[string]rollout.EvalResult, mesh.Loaded, error) {
	return mesh.EvaluateCurrent(ctx, js, env, rollout.EvalConfig{Tasks: tasks, Episodes: n, Seed: seed})
}

// periodicEvals records the held-out evaluations made during training: a result as a point of the metrics
// file and on the progress display, a failure in the log and in a count the progress display and the end of
// the run report.
type periodicEvals struct {
	metrics  *runout.Metrics
	progress *progress
	log      zerolog.Logger
	done     int // evaluations recorded
	failed   int // evaluations that failed
}

// record takes the outcome of one evaluation, trained being the episodes trained when it is taken. It says
// whether the evaluation succeeded, and returns an error only if its point could not be written.
func (e *periodicEvals) record(o evalOutcome, trained int64) (bool, error) {
	if o.err != nil {
		e.failed++
		e.progress.failedEvals = e.failed
		e.log.Warn().Err(o.err).Int64("version", o.version).Dur("at", o.at).Int("failed", e.failed).
			Msg("held-out evaluation during training failed")
		return false, nil
	}
	if err := e.metrics.Add(evalPoint(o.at.Seconds(), o.version, trained, o.res)); err != nil {
		return false, err
	}
	e.done++
	e.progress.note(o.res)
	return true, nil
}

func evalPoint(seconds float64, version, trained int64, res map[string]rollout.EvalResult) runout.Point {
	p := runout.Point{Kind: "eval", Seconds: seconds, Version: version, EpisodesTrained: trained, Tasks: map[string]runout.TaskPoint{}}
	for t, r := range res {
		p.Tasks[t] = runout.TaskPoint{Success: r.Success, MeanReward: r.MeanReward, Episodes: r.Episodes}
	}
	return p
}

func allAtLeast(res map[string]rollout.EvalResult, target float64) bool {
	for _, r := range res {
		if r.Success < target {
			return false
		}
	}
	return len(res) > 0
}

// ema is an exponential moving average of training success, for the progress display.
type ema struct {
	v   float64
	set bool
}

func (e *ema) add(x float64) {
	if !e.set {
		e.v, e.set = x, true
		return
	}
	e.v = 0.8*e.v + 0.2*x
}

// progress shows a bar on a terminal and a line every 15 s elsewhere (logs, CI).
type progress struct {
	bar       *progressbar.ProgressBar
	quiet     bool
	lastPrint time.Time
	heldout   string
	// failedEvals counts the held-out evaluations during training that failed.
	failedEvals int
}

func newProgress(budget time.Duration, quiet bool) *progress {
	p := &progress{quiet: quiet}
	if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		p.bar = progressbar.NewOptions64(int64(budget.Seconds()),
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetDescription("training"),
		)
	}
	return p
}

func (p *progress) update(elapsed time.Duration, version, episodes int64, recent map[string]*ema) {
	if p.quiet {
		return
	}
	names := make([]string, 0, len(recent))
	for t := range recent {
		names = append(names, t)
	}
	sort.Strings(names)
	var parts []string
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("%s %3.0f%%", t, 100*recent[t].v))
	}
	desc := fmt.Sprintf("v%-4d %6d episodes | train success: %s%s", version, episodes, strings.Join(parts, " "), p.heldout)
	if p.failedEvals > 0 {
		desc += fmt.Sprintf(" | failed evaluations: %d", p.failedEvals)
	}
	if p.bar != nil {
		p.bar.Describe(desc)
		_ = p.bar.Set64(int64(elapsed.Seconds()))
		return
	}
	if time.Since(p.lastPrint) >= 15*time.Second {
		p.lastPrint = time.Now()
		fmt.Fprintf(os.Stderr, "[%s] %s\n", elapsed.Round(time.Second), desc)
	}
}

func (p *progress) note(res map[string]rollout.EvalResult) {
	names := make([]string, 0, len(res))
	for t := range res {
		names = append(names, t)
	}
	sort.Strings(names)
	var parts []string
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", t, 100*res[t].Success))
	}
	p.heldout = " | held-out: " + strings.Join(parts, " ")
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}
