package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// benchCmd groups the performance benchmarks. Each prints a table, or with --json one JSON object.
type benchCmd struct {
	AsyncVsSync benchAsyncCmd   `cmd:"" name:"async-vs-sync" help:"Trained episodes per second, asynchronous mesh against synchronous rollout-then-train, on a long-tailed env."`
	Memory      benchMemoryCmd  `cmd:"" help:"Resident memory of each service, run as its own process, at the start and end of a long training run."`
	Mesh        benchMeshCmd    `cmd:"" help:"Data-plane throughput through all five services next to a raw JetStream publish-and-consume."`
	Scale       benchScaleCmd   `cmd:"" help:"Throughput with 1, 2 and 4 rollout replicas against latency-bound env hosts."`
	Weights     benchWeightsCmd `cmd:"" help:"Time from the trainer publishing a version to every rollout serving it, next to a raw Object Store put and get."`
}

// trialConfig is one measured run of the whole mesh (bench async-vs-sync and bench scale) on a fresh
// embedded server.
type trialConfig struct {
	// Mesh is the mesh to run; NATSURL, Log and Env.StepLatency are set by the trial.
	Mesh mesh.Config
	// Latency is added to every env step.
	Latency env.LatencyConfig
	// WarmupBatches are trained before the measured window opens (the pipeline fills meanwhile).
	WarmupBatches int64
	// Episodes is how many trained episodes the measured window spans at least: it closes at the first
	// version with WarmupBatches·B + Episodes episodes trained in all, so trials of one B end alike.
	Episodes int64
	// EvalEpisodes held-out episodes per task are played greedily with the policy of the window's last
	// version (0: no evaluation), from instances drawn with EvalSeed.
	EvalEpisodes int
	EvalSeed     uint64
	// HeldOutPoints > 1 (with EvalEpisodes) also evaluates, the same way, the policy at the window's start
	// and at the end of each of its first HeldOutPoints-1 equal parts (their weights are fetched as the
	// trainer publishes them and played after the run, so the window's timing is not disturbed): the
	// held-out learning curve.
	HeldOutPoints int
	// Timeout bounds the whole trial.
	Timeout time.Duration
}

// trialResult is what one trial measured. Rates and busy fractions are over the measured window; the
// staleness histograms are over every episode the run trained.
type trialResult struct {
	EpisodesPerS float64 `json:"episodes_per_s"`
	EnvStepsPerS float64 `json:"env_steps_per_s"`
	Episodes     int64   `json:"episodes"`
	Seconds      float64 `json:"seconds"`
	Batches      int64   `json:"batches"`
	// TrainerBusy is the fraction of the window the trainer spent applying batches (update, checkpoint,
	// publishing weights and version); TrainerUpdate the fraction spent in the update alone.
	TrainerBusy   float64 `json:"trainer_busy"`
	TrainerUpdate float64 `json:"trainer_update"`
	// BatchSeconds is the window's time per batch; BusyPerBatch the trainer's time per batch in it.
	BatchSeconds float64 `json:"batch_seconds"`
	BusyPerBatch float64 `json:"trainer_seconds_per_batch"`
	// TrainedTurns are the turns the window's batches trained; UpdatePace is the trainer's update time
	// per trained turn and epoch, in microseconds: the machine's pace at the trainer's work, which the
	// batches' sizes and the epochs do not move, and the turns' lengths move less (a later turn of a long
	// episode costs more than an early one) (0 when the window trained none).
	TrainedTurns int64   `json:"trained_turns"`
	UpdatePace   float64 `json:"update_us_per_turn_epoch"`
	// EvalVersion is the policy version held-out success was measured with, after EpisodesTrained.
	EvalVersion     int64   `json:"eval_version"`
	EpisodesTrained int64   `json:"episodes_trained"`
	Staleness       []int64 `json:"staleness_episodes"`
	TurnStaleness   []int64 `json:"staleness_turns"`
	MaxStaleness    int64   `json:"max_staleness"`
	DroppedStale    int64   `json:"dropped_stale"`
	// DroppedStaleByTask is the replay-buffer's part of DroppedStale by task family (the trainer's own
	// drops, of batches that went stale in its queue, are not split), with the stale members a batch
	// carried for their group's baseline (--turn-staleness; StaleInBaseline, counted stale by the trainer).
	DroppedStaleByTask map[string]int64 `json:"dropped_stale_by_task_buffer"`
	// TrainedByTask counts the episodes the replay-buffer batched, by family; TrainedSuccessByTask is the
	// share of them that succeeded and StaleSuccessByTask the share of its stale drops that did (each over
	// the whole trial, its warm-up included). A family whose stale drops succeed far more often than its
	// trained episodes loses its successes to the staleness bound.
	TrainedByTask        map[string]int64   `json:"trained_by_task,omitempty"`
	TrainedSuccessByTask map[string]float64 `json:"trained_success_by_task,omitempty"`
	StaleSuccessByTask   map[string]float64 `json:"stale_success_by_task,omitempty"`
	// TrainedTurnsByTask and StaleTurnsByTask are the mean turns of those episodes.
	TrainedTurnsByTask map[string]float64 `json:"trained_turns_by_task,omitempty"`
	StaleTurnsByTask   map[string]float64 `json:"stale_turns_by_task,omitempty"`
	// TrainedMixedByTask and StaleMixedByTask are the share of those episodes' groups that had mixed outcomes
	// (some members won, some did not: the groups GRPO learns an outcome from). A staleness bound that drops
	// mixed groups more often than it trains them takes more of what a family can learn than its episodes.
	TrainedMixedByTask map[string]float64 `json:"trained_mixed_groups_by_task,omitempty"`
	StaleMixedByTask   map[string]float64 `json:"stale_mixed_groups_by_task,omitempty"`
	// CutPlaying counts members still playing when the replay-buffer took their group without them
	// (--cut); they are not trained and not in DroppedStale.
	CutPlaying int64 `json:"cut_playing"`
	// StaleInBaseline counts stale members carried in a batch for their group's baseline, and StaleTurns
	// the turns older than the bound that trained episodes left out (--turn-staleness).
	StaleInBaseline int64 `json:"stale_in_baseline"`
	StaleTurns      int64 `json:"stale_turns"`
	InfraFailures   int64 `json:"infra_failures"`
	// StoppedStale counts the stale drops whose rollout stopped playing them once no batch could take them
	// (--stop-stale), over the whole trial, and StoppedStaleTurns the turns they had played.
	StoppedStale      int64                         `json:"stopped_stale"`
	StoppedStaleTurns int64                         `json:"stopped_stale_turns"`
	HeldOut           map[string]rollout.EvalResult `json:"heldout,omitempty"`
	HeldOutSuccess    float64                       `json:"heldout_success"`
	// HeldOutCurve is held-out success along the window (trialConfig.HeldOutPoints > 1): at its start, then
	// after each equal part; the last point is HeldOut's.
	HeldOutCurve []heldOutPoint `json:"heldout_curve,omitempty"`
}

// heldOutPoint is held-out success of one policy version along a trial's window.
type heldOutPoint struct {
	EpisodesTrained int64              `json:"episodes_trained"`
	Version         int64              `json:"version"`
	Success         float64            `json:"success"`
	ByTask          map[string]float64 `json:"by_task"`
}

// curveMark is a version whose weights are kept for the held-out curve.
type curveMark struct {
	version, trained int64
	weights          []byte
}

// trialMark is the mesh's counters at one train step event.
type trialMark struct {
	at      time.Time
	version int64
	trained int64
	busy    float64
	update  float64
	turns   int64
	// trainedTurns is the trainer's count of trained turns, read with busy and update.
	trainedTurns int64
}

// runTrial starts an embedded server and the mesh, trains WarmupBatches batches, measures the next Episodes
// trained episodes, evaluates the policy they produced, and stops everything it started.
func runTrial(ctx context.Context, tc trialConfig, log zerolog.Logger) (*trialResult, error) {
	ctx, cancel := context.WithTimeout(ctx, tc.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "jetrl-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	mc := tc.Mesh
	mc.NATSURL, mc.Dial, mc.Log = srv.URL(), []nats.Option{srv.InProcess()}, log
	if mc.Env.StepLatency, err = tc.Latency.StepLatency(); err != nil {
		return nil, err
	}
	m, err := mesh.Start(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	if err := m.WaitVersion(ctx, 0); err != nil {
		return nil, err
	}
	admin, err := bus.Connect(ctx, srv.URL(), "jetrl-bench", log, srv.InProcess())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	steps := make(chan *nats.Msg, 4096)
	sub, err := admin.ChanSubscribe(proto.SubjectEventTrainStep, steps)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := admin.Flush(); err != nil {
		return nil, err
	}
	// mark takes the counters as of version: the time the trainer published it, and its busy time once the
	// batch that made it is counted (the trainer adds a batch's busy time after publishing).
	mark := func(version, trained int64, at time.Time) (trialMark, error) {
		mk := trialMark{at: at, version: version, trained: trained}
		for _, r := range m.Rollouts {
			mk.turns += r.Status().Turns
		}
		for {
			if s := m.Trainer.Stats(); s.Version >= version {
				mk.busy, mk.update = s.BusySeconds, s.UpdateSeconds
				for _, n := range s.TurnStaleness {
					mk.trainedTurns += n
				}
				return mk, nil
			}
			select {
			case <-ctx.Done():
				return mk, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	js, err := bus.JetStream(admin)
	if err != nil {
		return nil, err
	}
	src, err := rollout.NewWeightsSource(ctx, js)
	if err != nil {
		return nil, err
	}
	// keep fetches the weights of version (just published, so still in the object store) for the curve.
	var curve []curveMark
	keep := func(version, trained int64) error {
		w, err := src.Objects.GetBytes(ctx, proto.WeightsObject(version))
		if err != nil {
			return fmt.Errorf("weights of version %d: %w", version, err)
		}
		curve = append(curve, curveMark{version: version, trained: trained, weights: w})
		return nil
	}
	if err := m.StartRollouts(ctx); err != nil {
		return nil, err
	}
	var start, end *trialMark
	base := tc.WarmupBatches * int64(mc.BatchSize)
	target := base + tc.Episodes
	// next is the trained count of the next inner curve point (points 1..HeldOutPoints-1).
	// Without an evaluation there is no curve, and no weights are fetched for one.
	withCurve := tc.HeldOutPoints > 1 && tc.EvalEpisodes > 0
	nextPoint, next := int64(1), int64(-1)
	if withCurve {
		next = base + tc.Episodes/int64(tc.HeldOutPoints)
	}
	if tc.WarmupBatches == 0 {
		s, _ := mark(0, 0, time.Now())
		start = &s
		if withCurve {
			if err := keep(0, 0); err != nil {
				return nil, err
			}
		}
	}
	for end == nil {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("trial stopped after %v at policy version %d, %d episodes trained: %w",
				tc.Timeout, m.Trainer.Stats().Version, m.Trainer.Stats().EpisodesTrained, ctx.Err())
		case msg := <-steps:
			var ev proto.TrainStep
			if err := codec.Unmarshal(msg.Data, &ev); err != nil {
				return nil, fmt.Errorf("train step event: %w", err)
			}
			var mk trialMark
			switch {
			case start == nil && ev.Version >= tc.WarmupBatches:
				mk, err = mark(ev.Version, ev.EpisodesTrained, time.Unix(0, ev.At))
				start = &mk
				if err == nil && withCurve {
					err = keep(ev.Version, ev.EpisodesTrained)
				}
			case start != nil && ev.EpisodesTrained >= target:
				mk, err = mark(ev.Version, ev.EpisodesTrained, time.Unix(0, ev.At))
				end = &mk
			case start != nil && next >= 0 && ev.EpisodesTrained >= next:
				err = keep(ev.Version, ev.EpisodesTrained)
				if nextPoint++; nextPoint < int64(tc.HeldOutPoints) {
					next = base + nextPoint*tc.Episodes/int64(tc.HeldOutPoints)
				} else {
					next = -1
				}
			}
			if err != nil {
				return nil, err
			}
		}
		if err := m.Err(); err != nil {
			return nil, err
		}
	}
	// The weights of the window's last version, fetched now, while the object store still keeps them.
	if tc.EvalEpisodes > 0 {
		if err := keep(end.version, end.trained); err != nil {
			return nil, err
		}
	}
	m.StopRollouts()

	secs := end.at.Sub(start.at).Seconds()
	res := &trialResult{
		Episodes: end.trained - start.trained, Seconds: secs, Batches: end.version - start.version,
		TrainerBusy: (end.busy - start.busy) / secs, TrainerUpdate: (end.update - start.update) / secs,
		EvalVersion: end.version, EpisodesTrained: end.trained,
	}
	res.EpisodesPerS = float64(res.Episodes) / secs
	if res.Batches > 0 {
		res.BatchSeconds, res.BusyPerBatch = secs/float64(res.Batches), (end.busy-start.busy)/float64(res.Batches)
	}
	res.EnvStepsPerS = float64(end.turns-start.turns) / secs
	if res.TrainedTurns = end.trainedTurns - start.trainedTurns; res.TrainedTurns > 0 && tc.Mesh.Trainer.Epochs > 0 {
		res.UpdatePace = 1e6 * (end.update - start.update) / float64(res.TrainedTurns*int64(tc.Mesh.Trainer.Epochs))
	}
	ts, bs := m.Trainer.Stats(), m.Buffer.Stats()
	res.Staleness, res.TurnStaleness = ts.Staleness, ts.TurnStaleness
	res.MaxStaleness = max(ts.MaxStaleness, bs.MaxStaleness)
	res.DroppedStale = ts.StaleDropped + bs.DroppedStale
	res.CutPlaying, res.StaleInBaseline, res.StaleTurns = bs.Cut, bs.Baseline, ts.StaleTurns
	res.TrainedByTask, res.TrainedSuccessByTask, res.TrainedTurnsByTask, res.TrainedMixedByTask = tallyFigures(bs.BatchedByTask)
	res.DroppedStaleByTask, res.StaleSuccessByTask, res.StaleTurnsByTask, res.StaleMixedByTask = tallyFigures(bs.DroppedStaleByTask)
	for _, r := range m.Rollouts {
		st := r.Status()
		res.InfraFailures += st.InfraFailures
		res.StoppedStale += st.StoppedStale
		res.StoppedStaleTurns += st.StoppedStaleTurns
	}
	if tc.EvalEpisodes > 0 {
		ec := envclient.New(admin, envclient.Config{})
		for i, cm := range curve {
			byTask, err := trialEvaluate(ctx, ec, tc, mc.Tasks, cm)
			if err != nil {
				return nil, err
			}
			pt := heldOutPoint{EpisodesTrained: cm.trained, Version: cm.version, ByTask: map[string]float64{}}
			for task, r := range byTask {
				pt.ByTask[task] = r.Success
				pt.Success += r.Success / float64(len(byTask))
			}
			if i == len(curve)-1 {
				res.HeldOut, res.HeldOutSuccess = byTask, pt.Success
			}
			if len(curve) > 1 {
				res.HeldOutCurve = append(res.HeldOutCurve, pt)
			}
		}
	}
	m.Stop()
	return res, m.Err()
}

// trialEvaluate plays tc.EvalEpisodes held-out episodes per task greedily with the weights of cm.
func trialEvaluate(ctx context.Context, ec *envclient.Client, tc trialConfig, tasks []string, cm curveMark) (map[string]rollout.EvalResult, error) {
	model, err := policy.Load(cm.weights)
	if err != nil {
		return nil, fmt.Errorf("weights of version %d: %w", cm.version, err)
	}
	pool := rollout.NewWeightsPool(0, 0, true, tc.EvalSeed)
	pool.Set(model, cm.version)
	out, err := rollout.Evaluate(ctx, ec, pool, rollout.EvalConfig{Tasks: tasks, Episodes: tc.EvalEpisodes, Seed: tc.EvalSeed, Concurrency: 64})
	if err != nil {
		return nil, fmt.Errorf("held-out evaluation of version %d: %w", cm.version, err)
	}
	return out, nil
}

// trialLog is the services' log of a benchmark: on stderr, errors only unless asked.
func trialLog(level string) (zerolog.Logger, error) {
	return logging.New("bench", level, false, os.Stderr)
}

// benchPrintJSON prints v as one indented JSON object.
func benchPrintJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// trialHistString shows a staleness histogram as "0:n0 1:n1 ...".
func trialHistString(h []int64) string {
	parts := make([]string, len(h))
	for s, n := range h {
		parts[s] = fmt.Sprintf("%d:%d", s, n)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// trialHistMap keys a staleness histogram by staleness, for JSON.
func trialHistMap(h []int64) map[string]int64 {
	out := make(map[string]int64, len(h))
	for s, n := range h {
		out[strconv.Itoa(s)] = n
	}
	return out
}

// benchCPUProfile writes a CPU profile to path until the returned func is called (no path: no profile).
func benchCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// tallyFigures splits the replay-buffer's tallies by family into episodes, the share that succeeded, the
// mean turns and the share of groups with mixed outcomes (all nil when there is none).
func tallyFigures(m map[string]replaybuffer.Tally) (episodes map[string]int64, success, turns, mixed map[string]float64) {
	if len(m) == 0 {
		return nil, nil, nil, nil
	}
	episodes, success, turns, mixed = make(map[string]int64, len(m)), make(map[string]float64, len(m)), make(map[string]float64, len(m)), make(map[string]float64, len(m))
	for task, t := range m {
		episodes[task] = t.Episodes
		if t.Episodes > 0 {
			success[task], turns[task] = float64(t.Won)/float64(t.Episodes), float64(t.Turns)/float64(t.Episodes)
		}
		if t.Groups > 0 {
			mixed[task] = float64(t.Mixed) / float64(t.Groups)
		}
	}
	return episodes, success, turns, mixed
}
