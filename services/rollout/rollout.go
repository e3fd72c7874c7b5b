// Package rollout is the rollout service: it plays training episodes against env hosts with the current
// policy (and a stale copy of it), under the staleness gate, and publishes every finished episode to the
// episodes stream, deduplicated by episode id.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/jetrl/jetrl/shared/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"
)

// Defaults of Config.
const (
	DefaultGroupSize    = 8
	DefaultBatchSize    = 64
	DefaultEta          = 2
	DefaultConcurrency  = 64
	DefaultStaleEvery   = 25
	DefaultDrainTimeout = 10 * time.Second
	// DefaultHeartbeatEvery is how often a replica lists its open groups on proto.SubjectRolloutHeartbeat.
	DefaultHeartbeatEvery = time.Second
	// DefaultAdaptiveFloor is the least share of its weight an adaptive schedule leaves a task.
	DefaultAdaptiveFloor = 0.1
)

// Config of one rollout replica.
type Config struct {
	// ID names the replica in logs and episodes; default: a random id.
	ID string
	// Tasks to train on (each group is one task instance), interleaved in proportion to TaskWeights.
	Tasks []string
	// TaskWeights gives each task its share of groups; a task missing from it weighs 1.
	TaskWeights map[string]float64
	// GroupSize is G, the samples of one instance; BatchSize is B in episodes (a multiple of G).
	GroupSize, BatchSize int
	// Eta is the staleness bound; 0 is synchronous.
	Eta int
	// StopStale stops playing an episode as soon as no batch can take it: once the replay-buffer has
	// composed the last batch that could (its admission closed mark, proto.AdmissionClosed), or the
	// trainer's version has passed the version its group was admitted under by more than Eta. It is
	// published with the turns played, status proto.StatusStale, and its admission goes back to the gate
	// when its group settles, instead of after its last turns. This holds while the replay-buffer and the
	// trainer judge an episode by its admission version; leave it off when they judge each turn (their
	// TurnStaleness).
	StopStale bool
	// Concurrency is the most episodes this replica plays at once.
	Concurrency int
	// StaleEvery and StaleProb configure cross-policy sampling (StaleProb 0 turns it off).
	StaleEvery int64
	StaleProb  float64
	// AdaptiveTasks scales each task's weight by how much its groups still have to teach: the larger of
	// the recent share of its groups whose rewards differ (GRPO learns only from those) and the recent
	// shortfall of its mean reward from 1, floored at AdaptiveFloor (default 0.1). A family the policy has
	// solved falls to the floor; one it is learning, or has not cracked yet, keeps its full weight.
	AdaptiveTasks bool
	AdaptiveFloor float64
	// CheckpointObject names a saved policy in the weights Object Store that joins the pool as a fixed
	// member, used by a turn with probability CheckpointProb (empty: no such member).
	CheckpointObject string
	CheckpointProb   float64
	// Seed of instance draws and sampling.
	Seed uint64
	// CallTimeout bounds each env call.
	CallTimeout time.Duration
	// DrainTimeout is how long shutdown lets episodes in flight finish before they are cut short.
	DrainTimeout time.Duration
	// HeartbeatEvery is how often the replica publishes the groups it still plays (a RolloutHeartbeat),
	// so the replay-buffer can release the open groups of a replica that died without waiting for its
	// group timeout.
	HeartbeatEvery time.Duration
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	if c.ID == "" {
		c.ID = service.NewID()
	}
	if c.GroupSize == 0 {
		c.GroupSize = DefaultGroupSize
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.StaleEvery == 0 {
		c.StaleEvery = DefaultStaleEvery
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.AdaptiveFloor == 0 {
		c.AdaptiveFloor = DefaultAdaptiveFloor
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = DefaultHeartbeatEvery
	}
}

// Validate explains what is wrong with a configuration.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("rollout: at least one task is required"))
	}
	if c.GroupSize < 1 || c.GroupSize > proto.MaxGroupSize {
		errs = append(errs, fmt.Errorf("rollout: group size %d must be 1 to %d", c.GroupSize, proto.MaxGroupSize))
	}
	if c.BatchSize < c.GroupSize || c.BatchSize%c.GroupSize != 0 {
		errs = append(errs, fmt.Errorf("rollout: batch size %d must be a positive multiple of group size %d", c.BatchSize, c.GroupSize))
	}
	if c.Eta < 0 {
		errs = append(errs, fmt.Errorf("rollout: eta %d must be >= 0", c.Eta))
	}
	for t, w := range c.TaskWeights {
		if !(w > 0) || math.IsInf(w, 0) {
			errs = append(errs, fmt.Errorf("rollout: weight %v of task %s must be a positive number", w, t))
		}
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("rollout: concurrency %d must be at least 1", c.Concurrency))
	}
	if c.StaleProb < 0 || c.StaleProb >= 1 {
		errs = append(errs, fmt.Errorf("rollout: stale probability %v must be in [0, 1)", c.StaleProb))
	}
	if c.AdaptiveFloor <= 0 || c.AdaptiveFloor > 1 {
		errs = append(errs, fmt.Errorf("rollout: adaptive floor %v must be in (0, 1]", c.AdaptiveFloor))
	}
	if c.CheckpointObject != "" && (!(c.CheckpointProb > 0) || c.CheckpointProb+c.StaleProb >= 1) {
		errs = append(errs, fmt.Errorf("rollout: checkpoint probability %v must be positive and, with the stale probability %v, below 1", c.CheckpointProb, c.StaleProb))
	}
	if c.HeartbeatEvery < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("rollout: heartbeat interval %v must be at least 10ms", c.HeartbeatEvery))
	}
	if c.CheckpointObject == "" && c.CheckpointProb != 0 {
		errs = append(errs, errors.New("rollout: a checkpoint probability without a checkpoint object"))
	}
	return errors.Join(errs...)
}

// Deps are what a replica needs from its process.
type Deps struct {
	Conn    *nats.Conn
	Log     zerolog.Logger
	Metrics prometheus.Registerer
}

// Rollout is one replica.
type Rollout struct {
	cfg  Config
	deps Deps
	pool *WeightsPool

	running  atomic.Bool
	inflight atomic.Int64
	// open holds the groups admitted and not finished publishing, listed in every heartbeat.
	open struct {
		sync.Mutex
		ids map[string]struct{}
	}
	schedule atomic.Pointer[TaskSchedule]
	// closedBelow is the replay-buffer's admission closed mark: no batch can take a group admitted below it.
	closedBelow atomic.Int64
	env         atomic.Pointer[envclient.Client] // while Run plays

	published, infra, breakerChanges *prometheus.CounterVec
	turns, unpublished, loadRetries  prometheus.Counter
	heartbeatsFailed, badMarks       prometheus.Counter
	startsUnannounced                prometheus.Counter
	gateWait                         prometheus.Histogram
	version                          prometheus.Gauge
	stats                            struct {
		sync.Mutex
		published, infraFailures, turns, breakerOpens, loadRetries int64
		stoppedStale, stoppedStaleTurns                            int64
	}
}

// New validates the configuration and builds a replica.
func New(cfg Config, deps Deps) (*Rollout, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Conn == nil {
		return nil, errors.New("rollout: Deps.Conn is required")
	}
	r := &Rollout{cfg: cfg, deps: deps, pool: NewWeightsPool(cfg.StaleEvery, cfg.StaleProb, false, cfg.Seed^0xa5a5)}
	r.published = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_rollout_episodes_published_total", Help: "Episodes published, by task and status."}, []string{"task", "status"})
	r.infra = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_rollout_infra_failures_total", Help: "Episodes lost to env failures (masked from training), by task."}, []string{"task"})
	r.unpublished = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_episodes_unpublished_total", Help: "Episodes that could not be published before shutdown."})
	r.breakerChanges = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_rollout_breaker_changes_total", Help: "Env host circuit breaker state changes, by new state."}, []string{"to"})
	r.loadRetries = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_weights_load_retries_total", Help: "Failed attempts to load a published version's weights (retried)."})
	r.startsUnannounced = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_group_starts_unannounced_total", Help: "Groups whose start marker could not be published (they still play and publish)."})
	r.heartbeatsFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_heartbeats_failed_total", Help: "Heartbeat messages that could not be published."})
	r.badMarks = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_closed_marks_malformed_total", Help: "Admission closed marks that could not be decoded (skipped)."})
	r.turns = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_rollout_turns_total", Help: "Turns played."})
	r.gateWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrl_rollout_gate_wait_seconds", Help: "Time a group waited at the staleness gate.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)})
	r.version = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetrl_rollout_policy_version", Help: "Policy version loaded."})
	envStat := func(f func(envclient.BatchStats) int64) func() float64 {
		return func() float64 {
			if env := r.env.Load(); env != nil {
				return float64(f(env.BatchStats()))
			}
			return 0
		}
	}
	envBatches := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jetrl_rollout_env_batches_total", Help: "Env batch requests sent (starts or steps of several episodes in one message)."},
		envStat(func(b envclient.BatchStats) int64 { return b.Batches }))
	envCalls := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jetrl_rollout_env_batched_calls_total", Help: "Env starts and steps sent in batch requests."},
		envStat(func(b envclient.BatchStats) int64 { return b.Calls }))
	envMalformed := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jetrl_rollout_env_malformed_replies_total", Help: "Env batch replies, or results in them, that could not be used."},
		envStat(func(b envclient.BatchStats) int64 { return b.Malformed }))
	if deps.Metrics != nil {
		for _, c := range []prometheus.Collector{r.published, r.infra, r.breakerChanges, r.turns, r.unpublished, r.loadRetries, r.gateWait, r.version, r.startsUnannounced, r.heartbeatsFailed, r.badMarks,
			envBatches, envCalls, envMalformed} {
			if err := deps.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("rollout metrics: %w", err)
			}
		}
	}
	return r, nil
}

// raiseClosed takes a new admission closed mark; the mark only rises.
func (r *Rollout) raiseClosed(below int64) {
	for {
		cur := r.closedBelow.Load()
		if below <= cur || r.closedBelow.CompareAndSwap(cur, below) {
			return
		}
	}
}

// Running reports whether the replica is playing.
func (r *Rollout) Running() bool { return r.running.Load() }

// Status is what the status endpoint reports.
type Status struct {
	ID            string `json:"id"`
	Version       int64  `json:"policy_version"`
	InFlight      int64  `json:"episodes_in_flight"`
	Published     int64  `json:"episodes_published"`
	InfraFailures int64  `json:"infra_failures"`
	// StoppedStale counts episodes stopped because no batch could take them any more (Config.StopStale),
	// and StoppedStaleTurns the turns they had played.
	StoppedStale      int64 `json:"episodes_stopped_stale"`
	StoppedStaleTurns int64 `json:"episodes_stopped_stale_turns"`
	Turns             int64 `json:"turns"`
	BreakerOpens      int64 `json:"breaker_opens"`
	// WeightsLoadRetries counts failed attempts to load a published version (each is retried).
	WeightsLoadRetries int64 `json:"weights_load_retries"`
	// EnvBatches and EnvBatchedCalls count the env batch requests sent and the starts and steps they
	// carried; EnvMalformedReplies the batch replies that could not be used.
	EnvBatches          int64 `json:"env_batches"`
	EnvBatchedCalls     int64 `json:"env_batched_calls"`
	EnvMalformedReplies int64 `json:"env_malformed_replies"`
	// EnvStartsOnOpenHosts counts sessions given back at once because their host's breaker was open.
	EnvStartsOnOpenHosts int64 `json:"env_starts_on_open_hosts"`
}

// Status returns the replica's counters.
func (r *Rollout) Status() Status {
	r.stats.Lock()
	defer r.stats.Unlock()
	st := Status{ID: r.cfg.ID, Version: r.pool.Version(), InFlight: r.inflight.Load(),
		Published: r.stats.published, InfraFailures: r.stats.infraFailures, Turns: r.stats.turns, BreakerOpens: r.stats.breakerOpens,
		WeightsLoadRetries: r.stats.loadRetries, StoppedStale: r.stats.stoppedStale, StoppedStaleTurns: r.stats.stoppedStaleTurns}
	if env := r.env.Load(); env != nil {
		b := env.BatchStats()
		st.EnvBatches, st.EnvBatchedCalls, st.EnvMalformedReplies, st.EnvStartsOnOpenHosts = b.Batches, b.Calls, b.Malformed, b.StartsOnOpenHosts
	}
	return st
}

// Run plays episodes until ctx ends, then stops admitting, lets episodes in flight finish for up to
// DrainTimeout and publishes them (cut-short ones as infrastructure failures), and returns. If the policy
// version watch ends first, Run stops the same way and returns the watch's error.
func (r *Rollout) Run(ctx context.Context) error {
	log := r.deps.Log.With().Str("rollout", r.cfg.ID).Logger()
	js, err := bus.JetStream(r.deps.Conn)
	if err != nil {
		return err
	}
	src, err := NewWeightsSource(ctx, js)
	if err != nil {
		return err
	}
	src.OnLoadError = func(int64, error) {
		r.loadRetries.Inc()
		r.stats.Lock()
		r.stats.loadRetries++
		r.stats.Unlock()
	}
	if r.cfg.CheckpointObject != "" {
		m, v, err := src.LoadCheckpoint(ctx, r.cfg.CheckpointObject)
		if err != nil {
			return err
		}
		if err := r.pool.SetCheckpoint(m, v, r.cfg.CheckpointProb); err != nil {
			return err
		}
		log.Info().Str("object", r.cfg.CheckpointObject).Int64("version", v).Float64("prob", r.cfg.CheckpointProb).Msg("checkpoint joins the policy pool")
	}
	counter, err := admission.Bind(ctx, js)
	if err != nil {
		return err
	}
	svc, err := service.Announce(r.deps.Conn, "rollout", r.cfg.ID, func() any { return r.Status() })
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()

	// This run's token: its heartbeats carry it, its claims are kept under it, its markers published
	// under it. Once the run's last group has played, its claim is removed, if its marker is out (else the
	// replay-buffer publishes it once this replica is silent: its members may not all have been).
	instance := nuid.Next()
	announced := true // the last marker this run tried to publish went out (true before any)
	defer func() {
		if !announced {
			log.Warn().Msg("last admission claim left for the replay-buffer: its group's start marker was not published")
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := counter.DropClaim(dctx, instance, nil); err != nil {
			log.Warn().Err(err).Msg("last admission claim not removed; the replay-buffer removes it once this replica is silent")
		}
	}()

	// The heartbeat goes on while episodes drain, and stops when Run returns.
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		r.heartbeat(beatCtx, instance, log)
	}()
	defer func() { stopBeat(); <-beatDone }()

	// The version watcher and the episode workers are owned here and stopped before Run returns. A watcher
	// that ends before it is stopped (its bucket went away, or the watch failed) ends admissions with its
	// error, as a cancelled ctx would: episodes must not go on at a version that no longer moves.
	admitCtx, stopAdmitting := context.WithCancelCause(ctx)
	defer stopAdmitting(nil)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	watchDone := make(chan error, 1)
	go func() {
		err := src.Watch(watchCtx, js, r.pool, log, func(v int64) { r.version.Set(float64(v)) })
		if watchCtx.Err() == nil {
			if err == nil {
				err = errors.New("the key-value watch closed its updates")
			}
			err = fmt.Errorf("%w: %w", errWatchEnded, err)
			log.Error().Err(err).Msg("policy version watch ended: stopping the rollout")
			stopAdmitting(err)
		}
		watchDone <- err
	}()
	defer func() { stopWatch(); <-watchDone }()
	if r.cfg.StopStale {
		// Without the mark, episodes still stop once the trainer's version passes their bound.
		closedDone := make(chan struct{})
		go func() {
			defer close(closedDone)
			err := counter.WatchClosed(watchCtx, r.raiseClosed, func(err error) {
				r.badMarks.Inc()
				log.Warn().Err(err).Msg("admission closed mark skipped")
			})
			if err != nil {
				log.Warn().Err(err).Msg("admission closed mark not watched: stale episodes stop at the next version")
			}
		}()
		defer func() { stopWatch(); <-closedDone }()
	}

	env := envclient.New(r.deps.Conn, envclient.Config{CallTimeout: r.cfg.CallTimeout, Breaker: breaker.Settings{
		OnChange: func(host string, from, to gobreaker.State) {
			r.breakerChanges.WithLabelValues(to.String()).Inc()
			r.stats.Lock()
			if to == gobreaker.StateOpen {
				r.stats.breakerOpens++
			}
			r.stats.Unlock()
			log.Warn().Str("host", host).Str("from", from.String()).Str("to", to.String()).Msg("env host breaker")
		},
	}})
	r.env.Store(env)
	defer func() { _ = env.Close() }() // after the episodes have drained (deferred later, run earlier)
	gate := NewStalenessGate(counter, r.cfg.BatchSize, r.cfg.Eta, r.pool.Version).WithConsumed(r.pool.Consumed).WakeOnVersion(r.pool.Changed)

	// Episodes run on a context that outlives ctx by DrainTimeout, so shutdown drains instead of dropping.
	playCtx, stopPlay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPlay()
	var wg sync.WaitGroup
	slots := make(chan struct{}, r.cfg.Concurrency)
	// The instances follow the seed and the id, salted by the admissions started before this run: a fresh
	// mesh's (none) are fixed by the seed, and a replica restarted under its id (a container's hostname)
	// does not play its first run's instances again, nor, as each turn's draw follows its instance, draw
	// their turns again.
	started, err := readStarted(ctx, counter)
	if err != nil {
		return err
	}
	groupSeed := r.cfg.Seed
	if started != 0 {
		groupSeed ^= policy.Mix64(uint64(started))
	}
	rng := rand.New(rand.NewPCG(groupSeed, policy.HashString(r.cfg.ID)))
	schedule := NewTaskSchedule(r.cfg.Tasks, r.cfg.TaskWeights)
	if r.cfg.AdaptiveTasks {
		schedule.SetAdaptive(r.cfg.AdaptiveFloor)
	}
	r.schedule.Store(schedule)
	r.running.Store(true)
	log.Info().Strs("tasks", r.cfg.Tasks).Int("group", r.cfg.GroupSize).Int("batch", r.cfg.BatchSize).Int("eta", r.cfg.Eta).Int64("admissions_before", started).Msg("rollout started")

	var loopErr error
	for g := 0; admitCtx.Err() == nil; g++ {
		// Wait for room for a whole group before claiming admissions, so claimed episodes start at once.
		if err := acquire(admitCtx, slots, r.cfg.GroupSize); err != nil {
			break
		}
		t0 := time.Now()
		// The claim names its group (the counter keeps this instance's last claim): if this replica dies
		// before the group's start marker is out, the replay-buffer publishes it in its stead.
		task, groupID := schedule.Next(), nuid.Next()
		claim, v, err := gate.AdmitAs(admitCtx, int64(r.cfg.GroupSize), instance,
			proto.AdmissionClaim{GroupID: groupID, Task: task, GroupSize: r.cfg.GroupSize, RolloutID: r.cfg.ID})
		if err != nil {
			release(slots, r.cfg.GroupSize)
			if errors.Is(err, admission.ErrClaimUncertain) {
				// The claim may have landed without its reply: its group is announced and will not play, so
				// the replay-buffer times it out and gives back what it may hold (if the claim did not land,
				// that gives back more than was taken, which the trainer's own staleness check absorbs;
				// holding the room for good would narrow the gate instead).
				// The counter may still hold the claim before this one: both markers must be out.
				announced = r.announce(ctx, js, instance, claim.Start(), log) && announced
				log.Error().Err(err).Int64("version", v).Msg("admission claim uncertain: announced a group that will not play, so its admissions come back")
			}
			if admitCtx.Err() == nil {
				loopErr = err
			}
			break
		}
		r.gateWait.Observe(time.Since(t0).Seconds())
		seed := rng.Uint64()
		r.opened(groupID)
		start := claim.Start()
		start.StartedAt = time.Now().UnixNano()
		announced = r.announce(ctx, js, instance, start, log)
		outcome := &groupOutcome{task: task, left: r.cfg.GroupSize, schedule: schedule, done: func() { r.closed(groupID) }}
		var expired func() bool
		if r.cfg.StopStale {
			last := v + int64(r.cfg.Eta) // the last version a batch can take the group at
			expired = func() bool { return r.closedBelow.Load() > v || r.pool.Version() > last }
		}
		for k := 0; k < r.cfg.GroupSize; k++ {
			spec := EpisodeSpec{
				ID: fmt.Sprintf("%s-%d", groupID, k), GroupID: groupID, GroupSize: r.cfg.GroupSize, Member: k,
				Task: task, Split: proto.SplitTrain, Seed: seed, RolloutID: r.cfg.ID, StartVersion: v, Expired: expired,
			}
			wg.Add(1)
			r.inflight.Add(1)
			go func() {
				defer wg.Done()
				defer r.inflight.Add(-1)
				defer release(slots, 1)
				outcome.add(r.play(playCtx, js, env, spec, log))
			}()
		}
	}
	if cause := context.Cause(admitCtx); loopErr == nil && ctx.Err() == nil && errors.Is(cause, errWatchEnded) {
		loopErr = cause
	}
	r.running.Store(false)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(r.cfg.DrainTimeout):
		log.Warn().Int64("in_flight", r.inflight.Load()).Msg("drain timeout: cutting episodes short")
		stopPlay()
		<-drained
	}
	log.Info().Interface("status", r.Status()).Msg("rollout stopped")
	return loopErr
}

// errWatchEnded says the policy version watcher ended while the rollout still ran.
var errWatchEnded = errors.New("rollout: policy version watch ended")

// play runs one episode and publishes it; an episode cut short by shutdown is published as an
// infrastructure failure so that its group does not wait for it.
func (r *Rollout) play(ctx context.Context, js jetstream.JetStream, env *envclient.Client, spec EpisodeSpec, log zerolog.Logger) proto.Episode {
	ep, err := RunEpisode(ctx, env, r.pool, spec)
	if err != nil {
		ep.InfraFailure, ep.Status, ep.Failure = true, proto.StatusError, "rollout shut down: "+err.Error()
		ep.FinishedAt = time.Now().UnixNano()
	}
	r.publish(ctx, js, ep, log)
	return ep
}

// publish stores the episode in the episodes stream, retrying until it is stored: a finished episode is
// never dropped while the replica runs. Retries are safe because the stream deduplicates by episode id.
// Only when shutdown has cut the drain short and NATS still refuses does it give up, loudly.
func (r *Rollout) publish(ctx context.Context, js jetstream.JetStream, ep proto.Episode, log zerolog.Logger) {
	data, err := codec.Marshal(ep, proto.MaxEpisodeBytes)
	if errors.Is(err, proto.ErrPayloadTooLarge) {
		// Keep the group's accounting right: publish the episode's identity as an infrastructure failure.
		log.Error().Err(err).Str("episode", ep.ID).Msg("episode too large; published without turns")
		ep.Turns, ep.InfraFailure, ep.Status, ep.Failure = nil, true, proto.StatusError, err.Error()
		data, err = codec.Marshal(ep, proto.MaxEpisodeBytes)
	}
	if err != nil {
		log.Error().Err(err).Str("episode", ep.ID).Msg("encode episode")
		return
	}
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := bus.PublishOnce(pctx, js, proto.SubjectEpisodes(ep.Task), ep.ID, data)
		cancel()
		if err == nil {
			break
		}
		if attempt%10 == 0 {
			log.Warn().Err(err).Str("episode", ep.ID).Int("attempt", attempt).Msg("publish episode: retrying")
		}
		if errors.Is(err, nats.ErrConnectionClosed) || (ctx.Err() != nil && attempt >= 3) {
			r.unpublished.Inc()
			log.Error().Err(err).Str("episode", ep.ID).Str("group", ep.GroupID).Msg("publish episode: giving up at shutdown; the replay-buffer's group timeout accounts for it")
			return
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
	}
	status := ep.Status
	r.stats.Lock()
	r.stats.published++
	r.stats.turns += int64(len(ep.Turns))
	if ep.InfraFailure {
		r.stats.infraFailures++
		r.infra.WithLabelValues(ep.Task).Inc()
	}
	if ep.Status == proto.StatusStale {
		r.stats.stoppedStale++
		r.stats.stoppedStaleTurns += int64(len(ep.Turns))
	}
	r.stats.Unlock()
	r.turns.Add(float64(len(ep.Turns)))
	r.published.WithLabelValues(ep.Task, status).Inc()
	log.Debug().Str("episode", ep.ID).Str("task", ep.Task).Str("status", status).Float64("reward", ep.Reward).Int("turns", len(ep.Turns)).Msg("episode published")
}

// announce publishes a group's start marker, so that the replay-buffer accounts for the group's admissions
// even if this replica dies before publishing its episodes. The marker is insurance, not a condition: when
// NATS refuses it a few times the group plays anyway (counted and logged).
// It reports whether the marker was published.
func (r *Rollout) announce(ctx context.Context, js jetstream.JetStream, instance string, start proto.GroupStart, log zerolog.Logger) bool {
	data, err := codec.Marshal(start, 0)
	for attempt := 0; err == nil && attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, perr := bus.PublishGroupStart(pctx, js, instance, start.GroupID, data)
		cancel()
		if perr == nil {
			return true
		}
		if attempt == 2 {
			err = perr
		}
	}
	r.startsUnannounced.Inc()
	log.Warn().Err(err).Str("group", start.GroupID).Msg("group start marker not published; the group plays on")
	return false
}

// opened and closed keep the heartbeat's list of open groups: a group is open from its admission until
// the last of its episodes is published (or given up at shutdown).
func (r *Rollout) opened(groupID string) {
	r.open.Lock()
	defer r.open.Unlock()
	if r.open.ids == nil {
		r.open.ids = map[string]struct{}{}
	}
	r.open.ids[groupID] = struct{}{}
}

func (r *Rollout) closed(groupID string) {
	r.open.Lock()
	defer r.open.Unlock()
	delete(r.open.ids, groupID)
}

// heartbeat publishes the open groups every HeartbeatEvery (at once, then on each tick) until ctx ends.
func (r *Rollout) heartbeat(ctx context.Context, instance string, log zerolog.Logger) {
	tick := time.NewTicker(r.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		r.open.Lock()
		ids := slices.Collect(maps.Keys(r.open.ids))
		r.open.Unlock()
		for part := 0; part == 0 || len(ids) > 0; part++ {
			n := min(len(ids), proto.MaxHeartbeatGroups)
			hb := proto.RolloutHeartbeat{Schema: proto.SchemaVersion, RolloutID: r.cfg.ID, Groups: ids[:n], SentAt: time.Now().UnixNano(), Instance: instance}
			ids = ids[n:]
			data, err := codec.Marshal(hb, 0)
			if err == nil {
				err = r.deps.Conn.Publish(proto.SubjectRolloutHeartbeat, data)
			}
			if err != nil {
				r.heartbeatsFailed.Inc()
				log.Debug().Err(err).Msg("heartbeat not published")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// groupOutcome collects the outcomes of one group's episodes and, when the last is in, tells the schedule
// whether the group carried a learning signal (and calls done).
type groupOutcome struct {
	task     string
	schedule *TaskSchedule
	done     func()

	mu       sync.Mutex
	left     int
	outcomes map[[2]any]bool
	rewards  []float64
}

func (g *groupOutcome) add(ep proto.Episode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.outcomes == nil {
		g.outcomes = map[[2]any]bool{}
	}
	if !ep.InfraFailure && ep.Status != proto.StatusStale { // a stopped episode's reward says nothing
		// Reward and whether the agent ended it abnormally (shaped to the same reward by the normalizer).
		g.outcomes[[2]any{ep.Reward, ep.Status == proto.StatusTurnLimit || ep.Status == proto.StatusInvalidAction}] = true
		g.rewards = append(g.rewards, ep.Reward)
	}
	if g.left--; g.left == 0 && g.done != nil {
		g.done()
	}
	if g.left == 0 && len(g.rewards) > 0 {
		mean := 0.0
		for _, r := range g.rewards {
			mean += r
		}
		g.schedule.Observe(g.task, len(g.outcomes) > 1, mean/float64(len(g.rewards)))
	}
}

// TaskSchedule interleaves tasks in proportion to their weights (smooth weighted round robin), so that
// every task is played steadily rather than in bursts.
type TaskSchedule struct {
	mu      sync.Mutex
	tasks   []string
	weights []float64
	current []float64
	// signal is, per task, a moving average of the share of groups whose rewards differed, and gap one of
	// 1 - the groups' mean reward (clamped to [0, 1]); adaptive schedules scale each weight by
	// max(floor, signal, gap).
	signal   []float64
	gap      []float64
	adaptive bool
	floor    float64
}

// signalDecay is the weight of the past in a task's moving average of informative groups.
const signalDecay = 0.95

// NewTaskSchedule returns the schedule of tasks; a task missing from weights weighs 1.
func NewTaskSchedule(tasks []string, weights map[string]float64) *TaskSchedule {
	s := &TaskSchedule{tasks: tasks, weights: make([]float64, len(tasks)), current: make([]float64, len(tasks)),
		signal: make([]float64, len(tasks)), gap: make([]float64, len(tasks))}
	for i, t := range tasks {
		s.weights[i], s.signal[i], s.gap[i] = 1, 1, 1
		if w, ok := weights[t]; ok {
			s.weights[i] = w
		}
	}
	return s
}

// SetAdaptive makes the schedule scale each task's weight by how much its recent groups had to teach
// (see Config.AdaptiveTasks), but never below floor.
func (s *TaskSchedule) SetAdaptive(floor float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adaptive, s.floor = true, floor
}

// Observe records a finished group of task: whether its rewards differed (a group whose members all
// scored the same has zero GRPO advantage and teaches nothing) and its mean reward.
func (s *TaskSchedule) Observe(task string, informative bool, meanReward float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range s.tasks {
		if t == task {
			x := 0.0
			if informative {
				x = 1
			}
			s.signal[i] = signalDecay*s.signal[i] + (1-signalDecay)*x
			if !math.IsNaN(meanReward) {
				s.gap[i] = signalDecay*s.gap[i] + (1-signalDecay)*(1-min(max(meanReward, 0), 1))
			}
		}
	}
}

// Shares returns each task's current share of groups.
func (s *TaskSchedule) Shares() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, total := s.effective()
	out := make(map[string]float64, len(s.tasks))
	for i, t := range s.tasks {
		out[t] = w[i] / total
	}
	return out
}

func (s *TaskSchedule) effective() ([]float64, float64) {
	w := make([]float64, len(s.tasks))
	total := 0.0
	for i := range s.tasks {
		w[i] = s.weights[i]
		if s.adaptive {
			w[i] *= max(s.floor, s.signal[i], s.gap[i])
		}
		total += w[i]
	}
	return w, total
}

// Next returns the task of the next group (smooth weighted round robin over the effective weights).
func (s *TaskSchedule) Next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, total := s.effective()
	best := 0
	for i := range s.tasks {
		s.current[i] += w[i]
		if s.current[i] > s.current[best] {
			best = i
		}
	}
	s.current[best] -= total
	return s.tasks[best]
}

func acquire(ctx context.Context, slots chan struct{}, n int) error {
	for i := 0; i < n; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			release(slots, i)
			return ctx.Err()
		}
	}
	return nil
}

func release(slots chan struct{}, n int) {
	for i := 0; i < n; i++ {
		<-slots
	}
}

// readStarted reads the admissions started so far (the salt of a run's instances), trying a few times: a
// run whose salt could not be read fails rather than draw its instances some other way, which would
// silently break a seed's reproducibility.
func readStarted(ctx context.Context, counter *admission.Counter) (int64, error) {
	const tries = 5
	var err error
	for attempt := 1; attempt <= tries; attempt++ {
		var a proto.Admission
		if a, _, err = counter.Read(ctx); err == nil {
			return a.Started, nil
		}
		if attempt == tries {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("admission counter not read (the run's instances are salted by it): %w", err)
}
