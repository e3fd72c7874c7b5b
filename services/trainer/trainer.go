// Package trainer is the trainer service: it applies train batches in stream order with a PPO-style
// clipped policy-gradient update (Adam), checkpoints, and publishes each new policy version's weights to
// the Object Store and its record to KV. A restart resumes from the checkpoint: no batch is applied twice
// and none is skipped.
package trainer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/jetrl/jetrl/shared/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// ackWait is short so that a crashed trainer's batch in hand is redelivered soon after a restart;
// a long step keeps its batch with in-progress acks (see keepAlive).
const ackWait = 10 * time.Second

// groupKey is what the trainer remembers of an applied group (the last proto.MaxGroupsRemembered of them):
// the 64-bit FNV-1a hash of its id, 8 bytes a group where the id takes 22 (BenchmarkCheckpointEncode).
// Each version's new keys are logged in StreamTrainedGroups before its checkpoint, which holds only their
// count: the keys of every remembered group, written with every version, were 131 KB at the bound, most of
// the bytes the mesh stored. Two remembered ids with the same key (odds about n²/2^65: 7e-12 for n at the
// bound) would refuse one fresh group as a repeat, counted as duplicate episodes.
func groupKey(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// Config of the trainer.
type Config struct {
	ID     string
	Model  policy.Config
	Adam   policy.AdamConfig
	Loss   Objective
	Epochs int
	// Eta is the staleness bound; an episode admitted more than Eta versions ago is not trained (and counted).
	Eta int
	// TurnStaleness applies Eta to each turn instead, by the version that produced it: an episode trains
	// its turns from the first after its last one older than Eta (proto.Episode.TurnsWithin: turns of the
	// policy pool's stale copy and saved checkpoint are not judged), and is not trained (and counted stale) when none is left. Its advantages were
	// computed with its whole group either way.
	TurnStaleness bool
}

// DefaultConfig is the paper's objective with this model's defaults.
func DefaultConfig() Config {
	// A small entropy bonus keeps the linear policy from collapsing onto a deterministic plateau early.
	return Config{Loss: Objective{Clip: 0.2, DualClip: 3.0, EntropyCoef: 0.01, Correction: CorrectionNone, ISCap: 2}, Epochs: 2, Eta: 2}
}

// Validate explains what is wrong with a configuration.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Loss.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Epochs < 1 {
		errs = append(errs, fmt.Errorf("trainer: epochs %d must be at least 1", c.Epochs))
	}
	if c.Eta < 0 {
		errs = append(errs, fmt.Errorf("trainer: eta %d must be >= 0", c.Eta))
	}
	return errors.Join(errs...)
}

// Deps are what the trainer needs from its process.
type Deps struct {
	Conn    *nats.Conn
	Log     zerolog.Logger
	Metrics prometheus.Registerer
}

// checkpoint is what the trainer stores in BucketCheckpoints after every applied batch.
type checkpoint struct {
	Schema      int    `msgpack:"schema"`
	Version     int64  `msgpack:"version"`
	Model       []byte `msgpack:"model"`
	Adam        []byte `msgpack:"adam"`
	Reference   []byte `msgpack:"reference,omitempty"`
	LastBatchID string `msgpack:"last_batch_id"`
	// GroupsRemembered is how many applied groups' keys the trainer held at this version; their records in
	// StreamTrainedGroups (of this version and earlier ones) hold them.
	GroupsRemembered int `msgpack:"groups_remembered"`
	// GroupKeys (8 bytes each, oldest first) and Groups (ids) are the applied groups of a checkpoint
	// written before the trainer logged them in StreamTrainedGroups; read, never written.
	GroupKeys       []byte   `msgpack:"group_keys,omitempty"`
	Groups          []string `msgpack:"groups,omitempty"`
	EpisodesTrained int64    `msgpack:"episodes_trained"`
	StaleDropped    int64    `msgpack:"stale_dropped"`
	MaxStaleness    int64    `msgpack:"max_staleness"`
	Staleness       []int64  `msgpack:"staleness,omitempty"`
	Batches         int64    `msgpack:"batches"`
	// LastStep is the step event of LastBatchID, so that a trainer that crashed after the checkpoint and
	// before the event was stored re-emits the same event, not a partial one.
	LastStep *proto.TrainStep `msgpack:"last_step,omitempty"`
	// RecentBatches are the ids of the last applied batches, oldest first, LastBatchID last. A batch that
	// was in hand at a crash can be redelivered after the next one has been applied; it is then known here.
	RecentBatches []string `msgpack:"recent_batches,omitempty"`
}

// recentBatches is how many applied batch ids the checkpoint keeps (the consumer holds at most two unacked).
const recentBatches = 8

// Trainer is the service.
type Trainer struct {
	cfg     Config
	deps    Deps
	running atomic.Bool

	model *policy.Model
	ref   *policy.Model // frozen reference of the KL penalty (nil when it is off)
	adam  *policy.Adam
	grad  []float64
	cp    checkpoint
	// kvRev is the revision of the policy version record this trainer last wrote or read at its start, and
	// published the record it last wrote: the fence against a second trainer (see fence).
	kvRev     uint64
	published *proto.PolicyVersion
	groups    map[uint64]struct{}
	keys      []byte // the keys of groups, oldest first, 8 bytes each (little-endian)
	// loggedAhead is the last version past the checkpoint that the trained-groups log held a record of at
	// restore (an attempt that crashed before its checkpoint): each version up to it is logged again, with
	// no keys if it trains none, so that the crashed attempt's record is never the last of its version.
	loggedAhead int64

	mu         sync.Mutex
	stats      Stats
	firstAt    time.Time
	busyTime   time.Duration
	updateTime time.Duration

	batches  *prometheus.CounterVec
	episodes prometheus.Counter
	version  prometheus.Gauge
	stepSecs prometheus.Histogram
	stale    prometheus.Histogram
	badLog   prometheus.Counter
}

// Stats are the trainer's counters.
type Stats struct {
	Version         int64 `json:"policy_version"`
	Batches         int64 `json:"batches_applied"`
	EpisodesTrained int64 `json:"episodes_trained"`
	Duplicates      int64 `json:"duplicate_batches"`
	DupEpisodes     int64 `json:"duplicate_episodes"`
	StaleDropped    int64 `json:"stale_dropped"`
	MaxStaleness    int64 `json:"max_staleness"`
	// BadGroupRecords counts messages in StreamTrainedGroups that were not trained-groups records (skipped).
	BadGroupRecords int64 `json:"bad_group_records,omitempty"`
	// StaleTurns counts the turns not trained, for being older than Eta, of episodes that trained their
	// later turns (Config.TurnStaleness).
	StaleTurns int64 `json:"stale_turns,omitempty"`
	// Staleness counts trained episodes by staleness: index s holds the episodes trained at version v+s that
	// were admitted under version v (never beyond Eta). TurnStaleness counts trained turns the same way, by
	// the version that produced each turn (beyond Eta only for turns of cross-policy sampling's stale copy).
	Staleness     []int64 `json:"staleness_episodes"`
	TurnStaleness []int64 `json:"staleness_turns"`
	DeadLettered  int64   `json:"dead_lettered"`
	// Refunded counts the admissions given back for the episodes of refused batches (they will never
	// train); RefundErrors the refunds that failed (their room in the staleness gate stays taken).
	Refunded     int64 `json:"admissions_refunded"`
	RefundErrors int64 `json:"refund_errors"`
	// BusySeconds is the time this process spent applying batches, from taking one to acking it: the
	// update, the checkpoint, publishing the weights and the version. UpdateSeconds is the update alone.
	// BusyFraction is BusySeconds over the wall time since the first batch this process took.
	BusySeconds   float64 `json:"busy_seconds"`
	UpdateSeconds float64 `json:"update_seconds"`
	BusyFraction  float64 `json:"busy_fraction"`
	LastBatchID   string  `json:"last_batch_id"`
	Resumed       bool    `json:"resumed_from_checkpoint"`
}

// New validates the configuration and builds the trainer.
func New(cfg Config, deps Deps) (*Trainer, error) {
	if cfg.ID == "" {
		cfg.ID = service.NewID()
	}
	cfg.Model.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Conn == nil {
		return nil, errors.New("trainer: Deps.Conn is required")
	}
	t := &Trainer{cfg: cfg, deps: deps, groups: map[uint64]struct{}{}}
	t.batches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_trainer_batches_total", Help: "Train batches, by outcome."}, []string{"outcome"})
	t.episodes = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_trainer_episodes_total", Help: "Episodes trained."})
	t.version = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetrl_trainer_policy_version", Help: "Policy version published."})
	t.stepSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrl_trainer_step_seconds", Help: "Time to apply one batch, checkpoint and publish.", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 14)})
	t.stale = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrl_trainer_staleness_versions", Help: "Staleness of trained episodes: version trained minus version admitted under.", Buckets: prometheus.LinearBuckets(0, 1, 10)})
	t.badLog = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_trainer_bad_group_records_total", Help: "Messages in the trained-groups log that were not records, skipped at restore."})
	if deps.Metrics != nil {
		for _, c := range []prometheus.Collector{t.batches, t.episodes, t.version, t.stepSecs, t.stale, t.badLog} {
			if err := deps.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("trainer metrics: %w", err)
			}
		}
	}
	return t, nil
}

// Running reports whether the trainer is consuming.
func (t *Trainer) Running() bool { return t.running.Load() }

// Stats returns a copy of the counters.
func (t *Trainer) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	s.Staleness, s.TurnStaleness = slices.Clone(s.Staleness), slices.Clone(s.TurnStaleness)
	s.BusySeconds, s.UpdateSeconds = t.busyTime.Seconds(), t.updateTime.Seconds()
	if !t.firstAt.IsZero() {
		if wall := time.Since(t.firstAt); wall > 0 {
			s.BusyFraction = t.busyTime.Seconds() / wall.Seconds()
		}
	}
	return s
}

type stores struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	weights jetstream.ObjectStore
	cps     jetstream.ObjectStore
	// counter is the staleness gate's admission counter: a refused batch gives its episodes' admissions back.
	counter *admission.Counter
}

// Run restores the checkpoint (or starts a new policy), publishes the current version, then applies train
// batches in order until ctx ends. The batch in hand is finished before Run returns.
func (t *Trainer) Run(ctx context.Context) error {
	log := t.deps.Log.With().Str("trainer", t.cfg.ID).Logger()
	var st stores
	var err error
	if st.js, err = bus.JetStream(t.deps.Conn); err != nil {
		return err
	}
	if st.kv, err = st.js.KeyValue(ctx, proto.BucketPolicy); err != nil {
		return fmt.Errorf("kv %s: %w", proto.BucketPolicy, err)
	}
	if st.weights, err = st.js.ObjectStore(ctx, proto.BucketWeights); err != nil {
		return fmt.Errorf("object store %s: %w", proto.BucketWeights, err)
	}
	if st.cps, err = st.js.ObjectStore(ctx, proto.BucketCheckpoints); err != nil {
		return fmt.Errorf("object store %s: %w", proto.BucketCheckpoints, err)
	}
	if st.counter, err = admission.Bind(ctx, st.js); err != nil {
		return err
	}
	if err := t.restore(ctx, st, log); err != nil {
		return err
	}
	if err := t.publishVersion(ctx, st, false); err != nil {
		return err
	}
	t.emitMissingStep(ctx, st, log)
	// Two batches may be delivered and unacked: the one being applied and the next, which then arrives while
	// this one trains instead of after its ack. They are still applied one at a time, in order.
	cons, err := st.js.CreateOrUpdateConsumer(ctx, proto.StreamTrain,
		bus.ConsumerConfig(proto.ConsumerTrainer, proto.SubjectTrain, 2, ackWait))
	if err != nil {
		return fmt.Errorf("trainer consumer: %w", err)
	}
	svc, err := service.Announce(t.deps.Conn, "trainer", t.cfg.ID, func() any { return t.Stats() })
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	t.running.Store(true)
	defer t.running.Store(false)
	log.Info().Int64("version", t.cp.Version).Int("params", t.model.NumParams()).Msg("trainer started")
	err = bus.ConsumeInOrder(ctx, cons, 2, log, func(m jetstream.Msg) error { return t.handle(ctx, st, m, log) })
	log.Info().Interface("stats", t.Stats()).Msg("trainer stopped")
	return err
}

// restore loads the checkpoint, or makes a new policy at version 0.
func (t *Trainer) restore(ctx context.Context, st stores, log zerolog.Logger) error {
	b, err := st.cps.GetBytes(ctx, proto.KeyCheckpoint)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		t.model, err = policy.New(t.cfg.Model)
		if err != nil {
			return err
		}
		t.adam = policy.NewAdam(t.model.NumParams(), t.cfg.Adam)
		t.cp = checkpoint{Schema: proto.SchemaVersion}
		// A log left by a run whose checkpoint is gone names groups of that run, not of this one.
		if gs, err := st.js.Stream(ctx, proto.StreamTrainedGroups); err != nil {
			return fmt.Errorf("stream %s: %w", proto.StreamTrainedGroups, err)
		} else if err := gs.Purge(ctx); err != nil {
			return fmt.Errorf("purge %s: %w", proto.StreamTrainedGroups, err)
		}
		t.grad = make([]float64, t.model.NumParams())
		if t.cfg.Loss.KLCoef > 0 {
			t.ref = t.model.Clone()
			if t.cp.Reference, err = t.ref.MarshalBinary(); err != nil {
				return err
			}
		}
		return t.saveCheckpoint(ctx, st)
	}
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	var cp checkpoint
	if err := codec.Unmarshal(b, &cp); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if t.model, err = policy.Load(cp.Model); err != nil {
		return fmt.Errorf("checkpoint model: %w", err)
	}
	t.adam = policy.NewAdam(t.model.NumParams(), t.cfg.Adam)
	if err := t.adam.UnmarshalBinary(cp.Adam); err != nil {
		return fmt.Errorf("checkpoint optimizer: %w", err)
	}
	if len(cp.GroupKeys)%8 != 0 {
		return fmt.Errorf("checkpoint: group keys of %d bytes, not a multiple of 8", len(cp.GroupKeys))
	}
	legacy := cp.GroupKeys
	for _, g := range cp.Groups {
		legacy = binary.LittleEndian.AppendUint64(legacy, groupKey(g))
	}
	logged, ahead, err := t.readTrainedGroups(ctx, st.js, cp.Version, log)
	if err != nil {
		return err
	}
	t.loggedAhead = ahead
	t.remember(legacy)
	t.remember(logged)
	if len(legacy) > 0 {
		// Log the checkpoint's own keys as its version's record, so the next checkpoint can leave them out.
		if err := t.logGroups(ctx, st, cp.Version, legacy); err != nil {
			return err
		}
		cp.GroupsRemembered = len(t.keys) / 8
	}
	cp.GroupKeys, cp.Groups = nil, nil
	if n := len(t.keys) / 8; n < cp.GroupsRemembered {
		log.Warn().Int("found", n).Int("checkpoint", cp.GroupsRemembered).Msg("the trained-groups log holds fewer groups than the checkpoint remembered; a redelivered group among the missing would train again")
	}
	t.cp = cp
	if t.cfg.Loss.KLCoef > 0 {
		if len(cp.Reference) == 0 {
			return errors.New("checkpoint has no reference policy, but the KL penalty is on: start a fresh run or turn it off")
		}
		if t.ref, err = policy.Load(cp.Reference); err != nil {
			return fmt.Errorf("checkpoint reference: %w", err)
		}
	}
	t.grad = make([]float64, t.model.NumParams())
	t.mu.Lock()
	t.stats.Version, t.stats.Batches, t.stats.EpisodesTrained = cp.Version, cp.Batches, cp.EpisodesTrained
	t.stats.StaleDropped, t.stats.MaxStaleness, t.stats.LastBatchID, t.stats.Resumed = cp.StaleDropped, cp.MaxStaleness, cp.LastBatchID, true
	t.stats.Staleness = slices.Clone(cp.Staleness)
	t.mu.Unlock()
	log.Info().Int64("version", cp.Version).Str("last_batch", cp.LastBatchID).Int64("episodes_trained", cp.EpisodesTrained).Msg("resumed from checkpoint")
	return nil
}

func (t *Trainer) saveCheckpoint(ctx context.Context, st stores) error {
	var err error
	if t.cp.Model, err = t.model.MarshalBinary(); err != nil {
		return err
	}
	if t.cp.Adam, err = t.adam.MarshalBinary(); err != nil {
		return err
	}
	data, err := codec.Marshal(t.cp, 0)
	if err != nil {
		return err
	}
	meta := jetstream.ObjectMeta{Name: proto.KeyCheckpoint, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize(len(data))}}
	if _, err := st.cps.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// ErrFenced says another trainer wrote the policy version record since this one last did: two trainers
// are running on one mesh. The one that finds it stops, before it writes its checkpoint when it can.
var ErrFenced = errors.New("another trainer published a policy version")

// current reads the version record and its revision (nil and 0 when there is none).
func current(ctx context.Context, st stores) (*proto.PolicyVersion, uint64, error) {
	e, err := st.kv.Get(ctx, proto.KeyPolicyCurrent)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read policy version: %w", err)
	}
	var rec proto.PolicyVersion
	if err := codec.Unmarshal(e.Value(), &rec); err != nil {
		return nil, e.Revision(), nil // written over by the next version
	}
	return &rec, e.Revision(), nil
}

// fence checks that the version record is still the one this trainer wrote last (or read at its start),
// adopting a revision that holds its own last record (a write whose reply was lost).
func (t *Trainer) fence(ctx context.Context, st stores) error {
	rec, rev, err := current(ctx, st)
	if err != nil {
		return err
	}
	if rev == t.kvRev {
		return nil
	}
	if t.published != nil && sameRecord(rec, *t.published) {
		t.kvRev = rev
		return nil
	}
	found := int64(-1)
	if rec != nil {
		found = rec.Version
	}
	return fmt.Errorf("%w: the version record is at revision %d (version %d), this trainer's at %d (version %d)", ErrFenced, rev, found, t.kvRev, t.cp.Version-1)
}

// sameRecord reports whether the stored record rec (nil: none) is the one this trainer wrote as want.
func sameRecord(rec *proto.PolicyVersion, want proto.PolicyVersion) bool {
	return rec != nil && rec.Version == want.Version && rec.BatchID == want.BatchID && rec.SHA256 == want.SHA256
}

// publishVersion puts the current weights in the Object Store and the version record in KV, the record
// only if no other trainer has written it since this one (compare-and-set, ErrFenced otherwise). With
// force false (at the start) it adopts the record as it is, and does nothing more when it already names
// this version (after a restart, or a retry).
func (t *Trainer) publishVersion(ctx context.Context, st stores, force bool) error {
	if !force {
		cur, rev, err := current(ctx, st)
		if err != nil {
			return err
		}
		t.kvRev, t.published = rev, cur
		if cur != nil && cur.Version == t.cp.Version {
			t.version.Set(float64(cur.Version))
			return nil
		}
	}
	rec := proto.PolicyVersion{Version: t.cp.Version, EpisodesTrained: t.cp.EpisodesTrained,
		EpisodesConsumed: t.cp.EpisodesTrained + t.cp.StaleDropped, BatchID: t.cp.LastBatchID}
	rec, rev, err := publishWeights(ctx, st.weights, rec, t.cp.Model, func(data []byte) (uint64, error) {
		if t.kvRev == 0 {
			return st.kv.Create(ctx, proto.KeyPolicyCurrent, data)
		}
		return st.kv.Update(ctx, proto.KeyPolicyCurrent, data, t.kvRev)
	})
	if err != nil && admission.IsConflict(err) {
		// Ours, if an earlier attempt's write landed without its reply; another trainer's otherwise.
		if cur, curRev, rerr := current(ctx, st); rerr == nil && sameRecord(cur, rec) {
			rev, err = curRev, nil
		} else {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
	}
	if err != nil {
		return err
	}
	t.kvRev, t.published = rev, &rec
	if old := t.cp.Version - proto.WeightsHistory; old >= 0 {
		_ = st.weights.Delete(ctx, proto.WeightsObject(old)) // older versions may already be gone
	}
	t.version.Set(float64(t.cp.Version))
	return nil
}

// handle applies one train batch. It returns an error only when the update cannot be made durable: then the
// in-memory state is ahead of the checkpoint and the trainer must stop, so a restart resumes from it.
func (t *Trainer) handle(ctx context.Context, st stores, m jetstream.Msg, log zerolog.Logger) error {
	var tb proto.TrainBatch
	if err := codec.Unmarshal(m.Data(), &tb); err != nil {
		t.refuse(ctx, st, m, err, 0, log) // no episodes to count
		return nil
	}
	if tb.ID == t.cp.LastBatchID || slices.Contains(t.cp.RecentBatches, tb.ID) {
		// Applied before a crash or lost ack (possibly redelivered after a later batch): the checkpoint has it.
		t.batches.WithLabelValues("duplicate").Inc()
		t.mu.Lock()
		t.stats.Duplicates++
		t.mu.Unlock()
		log.Info().Str("batch", tb.ID).Msg("batch already applied; acked again")
		if tb.ID != t.cp.LastBatchID { // an earlier version, whose step event was stored before the next one trained
			_ = m.Ack()
			return nil
		}
		// The step event may not have been stored before the crash; its msg id makes this a no-op if it was.
		ev := proto.TrainStep{Schema: proto.SchemaVersion, Version: t.cp.Version, BatchID: tb.ID, EpisodesTrained: t.cp.EpisodesTrained, At: time.Now().UnixNano()}
		if t.cp.LastStep != nil && t.cp.LastStep.BatchID == tb.ID && t.cp.LastStep.Version == t.cp.Version {
			ev = *t.cp.LastStep
		}
		t.emit(ctx, st, ev, log)
		_ = m.Ack()
		return nil
	}
	start := time.Now()
	defer keepAlive(m)()
	t.mu.Lock()
	if t.firstAt.IsZero() {
		t.firstAt = start
	}
	t.mu.Unlock()
	eps, from, dups, stale, maxStale := t.admit(tb.Episodes)
	var ss StepStats
	var err error
	// A refused batch leaves the weights and the optimizer's state as they were: an epoch that fails may
	// follow epochs that already stepped both.
	prev, prevAdam := t.model.Clone(), t.adam.Clone()
	updateStart := time.Now()
	if len(eps) > 0 {
		ss, err = t.update(eps, from)
	}
	updateTook := time.Since(updateStart)
	if err != nil {
		t.model, t.adam = prev, prevAdam
		t.refuse(ctx, st, m, err, len(eps)+stale, log)
		return nil
	}
	t.cp.Version++
	t.cp.LastBatchID = tb.ID
	t.cp.RecentBatches = append(t.cp.RecentBatches, tb.ID)
	if n := len(t.cp.RecentBatches) - recentBatches; n > 0 {
		t.cp.RecentBatches = slices.Delete(t.cp.RecentBatches, 0, n)
	}
	t.cp.Batches++
	t.cp.EpisodesTrained += int64(len(eps))
	t.cp.StaleDropped += int64(stale)
	t.cp.MaxStaleness = max(t.cp.MaxStaleness, maxStale)
	trainedAt, turnStale := t.cp.Version-1, map[int64]int64{} // the version these episodes trained
	for i, te := range eps {
		s := trainedAt - te.Episode.StartVersion
		if t.cfg.TurnStaleness {
			_, since, _ := te.Episode.TurnsWithin(trainedAt, t.cfg.Eta)
			s = trainedAt - since
		}
		t.cp.Staleness = countAt(t.cp.Staleness, s, 1)
		t.stale.Observe(float64(s))
		for _, turn := range te.Episode.Turns[from[i]:] {
			turnStale[trainedAt-turn.Version]++
		}
	}
	var fresh []byte // the keys of the groups this version trains for the first time
	for _, te := range eps {
		if k := groupKey(te.Episode.GroupID); !t.remembers(k) && !hasKey(fresh, k) {
			fresh = binary.LittleEndian.AppendUint64(fresh, k)
		}
	}
	t.remember(fresh)
	t.cp.GroupsRemembered = len(t.keys) / 8
	ev := proto.TrainStep{Schema: proto.SchemaVersion, Version: t.cp.Version, BatchID: tb.ID, Episodes: len(eps),
		EpisodesTrained: t.cp.EpisodesTrained, Loss: ss.Loss, ClipFraction: ss.ClipFraction, MaxStaleness: maxStale,
		Tasks: tb.Tasks, At: time.Now().UnixNano()}
	t.cp.LastStep = &ev
	// Durable first (the groups' record, then the checkpoint), then visible (weights, version), then acked:
	// a crash anywhere in between is repaired on restart by the checkpoint and the batch-id check above.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err = t.fence(pctx, st) // before anything durable: another trainer's state must not be written over
		if err == nil && (len(fresh) > 0 || t.cp.Version <= t.loggedAhead) {
			err = t.logGroups(pctx, st, t.cp.Version, fresh)
		}
		if err == nil {
			err = t.saveCheckpoint(pctx, st)
		}
		if err == nil {
			err = t.publishVersion(pctx, st, true)
		}
		if err == nil || pctx.Err() != nil || errors.Is(err, ErrFenced) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("trainer: persist version %d of batch %s (restart resumes from the checkpoint): %w", t.cp.Version, tb.ID, err)
	}
	t.emit(ctx, st, ev, log)
	_ = m.Ack()
	busy := time.Since(start)
	t.stepSecs.Observe(busy.Seconds())
	t.batches.WithLabelValues("applied").Inc()
	t.episodes.Add(float64(len(eps)))
	t.mu.Lock()
	t.busyTime += busy
	t.updateTime += updateTook
	t.stats.Staleness = slices.Clone(t.cp.Staleness)
	for s, n := range turnStale {
		t.stats.TurnStaleness = countAt(t.stats.TurnStaleness, s, n)
	}
	t.stats.Version, t.stats.Batches, t.stats.EpisodesTrained = t.cp.Version, t.cp.Batches, t.cp.EpisodesTrained
	t.stats.DupEpisodes += int64(dups)
	for i := range eps {
		t.stats.StaleTurns += int64(from[i])
	}
	t.stats.StaleDropped, t.stats.MaxStaleness, t.stats.LastBatchID = t.cp.StaleDropped, t.cp.MaxStaleness, tb.ID
	t.mu.Unlock()
	log.Debug().Str("batch", tb.ID).Int64("version", t.cp.Version).Int("episodes", len(eps)).Float64("loss", ss.Loss).Dur("took", busy).Msg("batch applied")
	return nil
}

// countAt adds n at index s of a histogram (s < 0, which no trained data has, counts at 0).
func countAt(h []int64, s, n int64) []int64 {
	s = max(s, 0)
	for int64(len(h)) <= s {
		h = append(h, 0)
	}
	h[s] += n
	return h
}

// keepAlive tells the server the message is still being worked on, every third of the ack wait, until the
// returned func is called.
func keepAlive(m jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(ackWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// emit stores the step event of one version in the events stream (the audit record of applied batches).
func (t *Trainer) emit(ctx context.Context, st stores, ev proto.TrainStep, log zerolog.Logger) {
	data, err := codec.Marshal(ev, 0)
	if err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err = bus.PublishOnce(pctx, st.js, proto.SubjectEventTrainStep, proto.TrainStepMsgID(ev.Version), data)
		cancel()
	}
	if err != nil {
		log.Warn().Err(err).Int64("version", ev.Version).Msg("step event not stored")
	}
}

// emitMissingStep stores the checkpoint's last step event when the events stream does not hold it: the
// trainer stopped after its checkpoint and before the event was stored, and the batch may never come back
// (a later batch can be delivered first). The stream's last step event tells; the msg id dedups a race.
func (t *Trainer) emitMissingStep(ctx context.Context, st stores, log zerolog.Logger) {
	last := t.cp.LastStep
	if last == nil || last.Version != t.cp.Version {
		return
	}
	events, err := st.js.Stream(ctx, proto.StreamEvents)
	if err != nil {
		log.Warn().Err(err).Msg("events stream; the last step event is not checked")
		return
	}
	raw, err := events.GetLastMsgForSubject(ctx, proto.SubjectEventTrainStep)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		log.Warn().Err(err).Msg("last step event; not checked")
		return
	default:
		var stored proto.TrainStep
		if codec.Unmarshal(raw.Data, &stored) == nil && stored.Version >= last.Version {
			return
		}
	}
	log.Info().Int64("version", last.Version).Str("batch", last.BatchID).Msg("step event missing after a restart; stored again")
	t.emit(ctx, st, *last, log)
}

// remembers reports whether the group of key k was applied (within the last proto.MaxGroupsRemembered).
func (t *Trainer) remembers(k uint64) bool {
	_, ok := t.groups[k]
	return ok
}

// remember adds the keys (8 bytes each) not yet remembered, then forgets the oldest beyond the bound.
func (t *Trainer) remember(keys []byte) {
	for i := 0; i+8 <= len(keys); i += 8 {
		if k := binary.LittleEndian.Uint64(keys[i:]); !t.remembers(k) {
			t.groups[k] = struct{}{}
			t.keys = binary.LittleEndian.AppendUint64(t.keys, k)
		}
	}
	if n := len(t.keys)/8 - proto.MaxGroupsRemembered; n > 0 {
		for i := 0; i < n*8; i += 8 {
			delete(t.groups, binary.LittleEndian.Uint64(t.keys[i:]))
		}
		t.keys = t.keys[n*8:]
	}
}

// hasKey reports whether keys (8 bytes each) holds k.
func hasKey(keys []byte, k uint64) bool {
	for i := 0; i+8 <= len(keys); i += 8 {
		if binary.LittleEndian.Uint64(keys[i:]) == k {
			return true
		}
	}
	return false
}

// logGroups stores the record of the groups version v trained for the first time.
func (t *Trainer) logGroups(ctx context.Context, st stores, v int64, keys []byte) error {
	data, err := codec.Marshal(proto.TrainedGroups{Schema: proto.SchemaVersion, Version: v, Keys: keys}, proto.MaxEpisodeBytes)
	if err != nil {
		return fmt.Errorf("trained groups of version %d: %w", v, err)
	}
	if _, err := st.js.Publish(ctx, proto.SubjectTrainedGroups, data); err != nil {
		return fmt.Errorf("store the trained groups of version %d: %w", v, err)
	}
	return nil
}

// readTrainedGroups returns the keys StreamTrainedGroups holds for the versions up to upTo, oldest version
// first, taking each version's last record (an earlier one is of an attempt that crashed before its
// checkpoint, whose batch may not be the one that trained that version in the end), and the last version
// past upTo that it holds a record of (0 if none).
func (t *Trainer) readTrainedGroups(ctx context.Context, js jetstream.JetStream, upTo int64, log zerolog.Logger) (keys []byte, ahead int64, err error) {
	s, err := js.Stream(ctx, proto.StreamTrainedGroups)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", proto.StreamTrainedGroups, err)
	}
	state := s.CachedInfo().State
	if state.Msgs == 0 {
		return nil, 0, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", proto.StreamTrainedGroups, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", proto.StreamTrainedGroups, err)
	}
	defer it.Stop()
	byVersion := map[int64][]byte{}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", proto.StreamTrainedGroups, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", proto.StreamTrainedGroups, err)
		}
		var rec proto.TrainedGroups
		if err := codec.Unmarshal(m.Data(), &rec); err != nil || len(rec.Keys)%8 != 0 {
			t.badLog.Inc()
			t.mu.Lock()
			t.stats.BadGroupRecords++
			t.mu.Unlock()
			log.Warn().Err(err).Uint64("seq", md.Sequence.Stream).Int("key_bytes", len(rec.Keys)).Msg("not a trained-groups record; skipped")
		} else if rec.Version <= upTo {
			byVersion[rec.Version] = rec.Keys
		} else {
			ahead = max(ahead, rec.Version)
		}
		if md.Sequence.Stream >= state.LastSeq {
			break
		}
	}
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		keys = append(keys, byVersion[v]...)
	}
	return keys, ahead, nil
}

// admit keeps the episodes that may train: not trained before (by group) and within the staleness bound.
// from[i] is the first turn of out[i] that trains (0 unless TurnStaleness cuts older turns).
func (t *Trainer) admit(in []proto.TrainEpisode) (out []proto.TrainEpisode, from []int, dups, stale int, maxStale int64) {
	for _, te := range in {
		if t.remembers(groupKey(te.Episode.GroupID)) {
			dups++
			continue
		}
		first, since, ok := 0, te.Episode.StartVersion, true
		if t.cfg.TurnStaleness {
			first, since, ok = te.Episode.TurnsWithin(t.cp.Version, t.cfg.Eta)
		}
		s := t.cp.Version - since
		if !ok || s > int64(t.cfg.Eta) {
			stale++
			continue
		}
		maxStale = max(maxStale, s)
		out = append(out, te)
		from = append(from, first)
	}
	return out, from, dups, stale, maxStale
}

// update runs the configured epochs of full-batch PPO updates.
func (t *Trainer) update(eps []proto.TrainEpisode, from []int) (StepStats, error) {
	var first StepStats
	bp := t.cfg.Loss.newPasses(t.model, t.ref, eps) // its proximal policy is filled by the first epoch, before the weights move
	bp.from = from
	for e := 0; e < t.cfg.Epochs; e++ {
		clear(t.grad)
		ss, err := t.cfg.Loss.accumulate(t.model, eps, bp, t.grad)
		if err != nil {
			return ss, err
		}
		if err := t.adam.Step(t.model.Weights, t.grad); err != nil {
			return ss, err
		}
		if e == 0 {
			first = ss
		}
	}
	return first, nil
}

// refuse dead-letters a train batch that cannot be applied, and gives the staleness gate back the
// admissions of its episodes that this trainer had not taken before (a batch's episodes are counted as
// consumed only when it trains): without that the room they hold would stay taken for good, and enough
// refused batches would shut the gate. A redelivery of a batch already dead-lettered refunds nothing.
func (t *Trainer) refuse(ctx context.Context, st stores, m jetstream.Msg, err error, episodes int, log zerolog.Logger) {
	t.batches.WithLabelValues("refused").Inc()
	t.mu.Lock()
	t.stats.DeadLettered++
	t.mu.Unlock()
	log.Error().Err(err).Int("episodes", episodes).Msg("train batch refused; dead-lettered")
	refunded, err := admission.RefuseBatch(ctx, st.js, st.counter, "trainer", m, err, episodes, log)
	t.mu.Lock()
	t.stats.Refunded += refunded
	if err != nil {
		t.stats.RefundErrors++
	}
	t.mu.Unlock()
}
