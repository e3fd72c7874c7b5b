// Package replaybuffer is the replay-buffer service: it collects episodes into complete GRPO groups,
// drops what is too stale, and releases batches of whole groups to the batches stream. An episode's
// message is acked only once the batch that holds it is stored (or once it is known never to train).
package replaybuffer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/admission"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultBatchSize    = 64
	DefaultEta          = 2
	DefaultGroupTimeout = 2 * time.Minute
	// DefaultReplicaTimeout is how long a rollout replica that heartbeats may go without listing one of its
	// open groups (or without beating at all) before the group is released.
	DefaultReplicaTimeout = 10 * time.Second
	DefaultMinGroup       = 2
	DefaultMaxQueued      = 2
	// queueRecheck is how soon a release held back by MaxQueued looks at the queue again, doubling up to
	// queueRecheckMax while it stays held; a new trainer version (the trainer acks its batch right after
	// publishing it) starts again from queueRecheck.
	queueRecheck    = time.Millisecond
	queueRecheckMax = 50 * time.Millisecond
	// recheckFloor is the least wait before a held release looks again, so a time to compose ahead
	// that has just passed cannot make the run loop spin.
	recheckFloor = 100 * time.Microsecond
	// ackWait is short so that a restarted buffer gets a crashed one's episodes back soon; the episodes it
	// holds are kept with in-progress acks every ackWait/3.
	ackWait = 30 * time.Second
	// maxRemembered bounds the ids of released groups kept to recognise late and repeated episodes: as
	// many as there can be unacked episodes (one group each, at most).
	maxRemembered = proto.MaxUnackedEpisodes
)

// Config of the replay-buffer.
type Config struct {
	ID string
	// BatchSize is B: a batch holds whole groups with at least B usable episodes.
	BatchSize int
	// MaxBatchSize bounds a batch when more groups are ready than B needs: it takes every ready group up to
	// this many episodes (default 2B), so data that is there trains now instead of waiting a version.
	MaxBatchSize int
	// Eta is the staleness bound: an episode admitted at version s is dropped once the trainer is past s+Eta.
	Eta int
	// GroupTimeout releases a group that is still missing members (their rollout died) after this long.
	GroupTimeout time.Duration
	// ReplicaTimeout releases a group sooner when its rollout replica heartbeats (proto.RolloutHeartbeat)
	// and has not listed the group for this long: the replica restarted under the same id and lost the
	// group. A replica that stopped beating (dead, or cut off from NATS with members still to publish) and
	// one never heard from are left to GroupTimeout. Default 10s; negative: only GroupTimeout.
	ReplicaTimeout time.Duration
	// MinGroup is the fewest usable members a group needs to train (GRPO needs two to compare).
	MinGroup int
	// MaxQueued bounds the batches released and not yet applied by the trainer (waiting at the
	// advantage-normalizer or the trainer, or being trained): the next batch is composed only when it can
	// go straight to the trainer, from the groups ready then, oldest admissions first, so fewer episodes
	// go stale waiting in a queue (default 2: one being trained, one waiting; negative: no bound).
	// Every batch is composed for the version it will train at: the current one plus the batches
	// released ahead of it and not applied yet.
	MaxQueued int
	// Lead, when above 0, composes the next batch this long before the trainer's current step is expected
	// to end, although MaxQueued batches are queued: the trainer then finds it waiting instead of idling
	// while it is composed and normalized. The expected end is the step's start plus its batch's turns
	// times the trainer's median time per turn over its last steps, as the policy versions show them
	// (pace); while a group the next batch is the last to take is still open, that batch waits until
	// Lead/4 before the end. 0: off.
	Lead time.Duration
	// Cut, when above 0, lets a group still playing train without its last members rather than go stale
	// whole: when a batch is composed for version v, a group admitted at v - Eta (this is the last batch
	// that can take it) is taken with the members that have arrived, once they are at least this share of
	// the group (and MinGroup usable). The members still playing are cut: counted, their admissions given
	// back, and counted late when they arrive. 0: off (a group trains whole, or not at all once stale,
	// unless its members time out). The members cut are the slowest, often the ones that wander to the
	// turn limit, so a group taken without them under-weights failure: off by default.
	Cut float64
	// TurnStaleness applies Eta to each turn, by the version that produced it (proto.Episode.TurnsWithin),
	// as the trainer does with its own TurnStaleness: a member is usable while one of its turns is within
	// the bound, and a group that trains takes its members with none along, for its GRPO baseline only
	// (the trainer counts them stale). Off: an episode is judged by the version it was admitted under.
	TurnStaleness bool
	// LeaseTTL is how long this buffer's lease (proto.KeyReplayBufferLease) may go unrenewed before another
	// buffer takes over; one started while another holds it stands by until then (default DefaultLeaseTTL).
	LeaseTTL time.Duration
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	if c.ID == "" {
		c.ID = service.NewID()
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBatchSize == 0 {
		c.MaxBatchSize = 2 * c.BatchSize
	}
	if c.GroupTimeout == 0 {
		c.GroupTimeout = DefaultGroupTimeout
	}
	if c.MinGroup == 0 {
		c.MinGroup = DefaultMinGroup
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = DefaultReplicaTimeout
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
}

// Validate explains what is wrong with a configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("replay-buffer: batch size %d must be at least 1", c.BatchSize))
	}
	if c.MaxBatchSize < c.BatchSize {
		errs = append(errs, fmt.Errorf("replay-buffer: max batch size %d must be at least the batch size %d", c.MaxBatchSize, c.BatchSize))
	}
	if c.Eta < 0 {
		errs = append(errs, fmt.Errorf("replay-buffer: eta %d must be >= 0", c.Eta))
	}
	if c.GroupTimeout < time.Second {
		errs = append(errs, fmt.Errorf("replay-buffer: group timeout %v must be at least 1s", c.GroupTimeout))
	}
	if c.MinGroup < 1 {
		errs = append(errs, fmt.Errorf("replay-buffer: min group %d must be at least 1", c.MinGroup))
	}
	if c.Lead < 0 || c.Lead > time.Minute {
		errs = append(errs, fmt.Errorf("replay-buffer: lead %v must be in [0, 1m]", c.Lead))
	}
	if !(c.Cut >= 0 && c.Cut <= 1) {
		errs = append(errs, fmt.Errorf("replay-buffer: cut %v must be a share in [0, 1]", c.Cut))
	}
	if c.Lead > 0 && c.MaxQueued < 1 {
		errs = append(errs, fmt.Errorf("replay-buffer: lead %v needs max queued at least 1, not %d", c.Lead, c.MaxQueued))
	}
	if c.LeaseTTL < 100*time.Millisecond || c.LeaseTTL > 5*time.Minute {
		errs = append(errs, fmt.Errorf("replay-buffer: lease ttl %v must be in [100ms, 5m]", c.LeaseTTL))
	}
	if c.ReplicaTimeout > 0 && c.ReplicaTimeout < time.Second {
		errs = append(errs, fmt.Errorf("replay-buffer: replica timeout %v must be at least 1s (negative: off)", c.ReplicaTimeout))
	}
	return errors.Join(errs...)
}

// Deps are what the buffer needs from its process.
type Deps struct {
	Conn    *nats.Conn
	Log     zerolog.Logger
	Metrics prometheus.Registerer
}

type member struct {
	ep  proto.Episode
	msg jetstream.Msg
}

type group struct {
	id, task string
	// rollout is the replica that plays the group (from its marker or first member).
	rollout string
	size    int
	// cutoff is the episodes stream's last sequence at cutoffAt, once the group's replica had been beating
	// without it for a while since listedAt, its last listing (cutoffSet): every member the replica
	// published is at or before it, so once the buffer has read that far, a member still missing will not
	// come.
	cutoff    uint64
	cutoffSet bool
	cutoffAt  time.Time
	listedAt  time.Time
	// startVersion is the version the group was admitted under (its members' StartVersion).
	startVersion int64
	// seed is the instance its members play (their Seed; 0 until one has arrived).
	seed      uint64
	members   map[string]member
	firstSeen time.Time
	// marker is the group's start marker (StreamGroups), held unacked until the group is settled, so a
	// restarted buffer still times out a group whose rollout died before publishing any member.
	marker jetstream.Msg
	// refunded counts the admissions given back while the group waited in the ready list (members that
	// are missing, masked or stale); settle gives back the rest.
	refunded int
	// recordRev is the revision of the group's refund record as this buffer last wrote or read it (0: none
	// known), the next write's compare-and-set; record is what it held then (or what it reads as), and
	// recordAt when it was written (zero when not known), so that it is written again before the bucket's
	// TTL expires it while the group is held (refreshRecords).
	recordRev uint64
	record    proto.GroupRefund
	recordAt  time.Time
	// cut says the group was taken while members still played, at its last chance (Config.Cut).
	cut bool
}

// Buffer is the replay-buffer.
type Buffer struct {
	cfg  Config
	deps Deps

	version atomic.Int64
	running atomic.Bool

	groups map[string]*group
	ready  []*group // complete (or timed out) groups, appended as they complete; sortReady orders them
	// unsettled holds the groups decided on (in a published batch, or unable to train) whose refund
	// failed: their members and markers stay unacked, so a restart still accounts for them, and settle
	// tries them again on every pass of the run loop.
	unsettled []settled
	// live is what the rollout replicas' heartbeats said about the open groups.
	live liveness
	// read is the episodes stream sequence up to which every message has been received (from the
	// consumer's ack floor at the start); above holds the sequences received past a gap, and gapSince is
	// when the lowest gap opened. A delivery lost in flight (a NATS node stopped under it) leaves a gap
	// that its redelivery fills within ackWait; a gap older than twice that is a message a previous buffer
	// acked out of order, and is passed. redeliveryUntil is when the episodes a previous buffer held
	// unacked have all come back: no group is released on a heartbeat before then, since its members may
	// be among them.
	read            uint64
	above           map[uint64]struct{}
	gapSince        time.Time
	redeliveryUntil time.Time
	// readyIDs indexes ready by group id, so that a member or marker of a group that is already ready
	// (complete, or timed out) joins it or is counted late instead of opening a second group of that id.
	readyIDs map[string]*group
	// readyChanged says ready changed since release last found too few usable episodes in it, at version
	// checkedAt; release does not look again (sorting every group) until it or the version changes.
	readyChanged bool
	checkedAt    int64
	released     map[string]struct{}
	order        []string // released group ids, oldest first, to bound released
	// held says the last release was held back because MaxQueued batches were queued; the run loop
	// calls release again after queueRecheck, or at wakeAt (the time to compose ahead, with Lead) if sooner.
	held   bool
	wakeAt time.Time
	// pace follows the released batches and the versions that applied them.
	pace *pace
	// queueCons are the advantage-normalizer's and the trainer's consumers, whose pending batches are the
	// queue MaxQueued bounds.
	queueCons [2]jetstream.Consumer
	// refundKV holds the GroupRefund records (proto.BucketRefunds); prior is what the records said when this
	// buffer started, by key, for the groups not seen since (recoverRefund takes them out).
	refundKV jetstream.KeyValue
	prior    map[string]priorRefund
	// Refunds are numbered passes (admission.Counter.RefundPass), each the pass after applied, the pass the
	// counter holds as far as this buffer knows (a pass that was not applied is numbered again, its records
	// rewritten: so the only pass a buffer may have recorded and not applied is the one a buffer starting
	// after it declares dead); doubt is a pass whose write failed and may have been applied all the same
	// (resolveDoubt settles it before anything else is given back), rewrite the groups whose record names
	// a pass that was not applied, written again with the next pass. owner is this run's token (its
	// lease's value), the counter's refund owner from its start (FenceHeld).
	applied uint64
	owner   string
	doubt   *refundPass
	rewrite map[*group]struct{}
	// passMoved is set when the counter holds a refund pass this buffer did not write, or another owner:
	// another buffer gives back, and this one stops.
	passMoved error

	mu    sync.Mutex
	stats Stats

	// heardSince is when this buffer last began to hear heartbeats: when it took the lease, or its
	// connection last came back (reconnects counts the comebacks, looked at every second); claimsAt is when it last looked at the
	// rollout instances' claims (recoverClaims).
	heardSince, claimsAt time.Time
	reconnects           uint64

	episodes, dropped                       *prometheus.CounterVec
	batches, claimsAnnounced                prometheus.Counter
	orphanedGroups, badHeartbeats, silences prometheus.Counter
	closeErrors, refundErrors               prometheus.Counter
	staleness                               prometheus.Histogram
	pending                                 prometheus.Gauge
}

// Stats are the buffer's counters.
type Stats struct {
	Received     int64 `json:"episodes_received"`
	Batched      int64 `json:"episodes_batched"`
	Batches      int64 `json:"batches_released"`
	DroppedStale int64 `json:"dropped_stale"`
	Masked       int64 `json:"masked_infra"`
	DroppedGroup int64 `json:"dropped_small_group"`
	// Oversized counts the usable members of groups too large for any batch: with the advantages added
	// they would not fit proto.MaxBatchBytes (see batchBudget).
	Oversized int64 `json:"dropped_oversized_group"`
	// RefundErrors counts failed refunds of admissions; the groups they were for are held unacked and
	// settled again until one succeeds.
	RefundErrors int64 `json:"refund_errors"`
	// RefundsRecovered counts the admissions a previous buffer had given back for groups this one was
	// delivered again (its GroupRefund records): they are not given back twice. RefundRecordErrors counts
	// failed writes of such records (the refund they were for is not made then, and is tried again), and
	// RefundRecordConflicts the records found changed by a write this buffer did not know of (its own
	// whose reply was lost, an expiry, or a buffer before it still running) and written over.
	RefundsRecovered      int64 `json:"refunds_recovered"`
	RefundRecordErrors    int64 `json:"refund_record_errors"`
	RefundRecordConflicts int64 `json:"refund_record_conflicts"`
	// RefundRecordsRefreshed counts the records of held groups written again before their TTL, and
	// RefundRecordRefreshErrors those writes that failed (tried again at the next look).
	RefundRecordsRefreshed    int64 `json:"refund_records_refreshed"`
	RefundRecordRefreshErrors int64 `json:"refund_record_refresh_errors"`
	Missing                   int64 `json:"missing_timeout"`
	// Cut counts members still playing when their group was taken without them (Config.Cut).
	Cut int64 `json:"cut_playing"`
	// Baseline counts stale members sent along in a batch for their group's baseline (Config.TurnStaleness);
	// the trainer counts them stale, so they are in neither Batched nor DroppedStale.
	Baseline    int64 `json:"stale_in_baseline,omitempty"`
	Duplicates  int64 `json:"duplicates"`
	Late        int64 `json:"late"`
	GroupStarts int64 `json:"group_starts"`
	// Orphaned counts groups released before their group timeout because their rollout replica no longer
	// plays them (see Config.ReplicaTimeout).
	Orphaned int64 `json:"orphaned_groups"`
	// Silences counts the times a rollout replica heard from went without a heartbeat for longer than
	// ReplicaTimeout (dead, or it or this buffer cut off from NATS): its open groups then wait for their
	// group timeout or its return.
	Silences int64 `json:"replica_silences"`
	// BadHeartbeats counts rollout heartbeats that could not be decoded or validated (ignored).
	BadHeartbeats int64 `json:"malformed_heartbeats"`
	// ClaimsAnnounced counts the start markers this buffer published for rollout instances that went
	// silent between an admission claim and its marker (see recoverClaims); ClaimsRemoved the last claims
	// of silent instances it removed (their groups announced).
	ClaimsAnnounced int64 `json:"claims_announced"`
	ClaimsRemoved   int64 `json:"claims_removed"`
	DeadLettered    int64 `json:"dead_lettered"`
	MaxStaleness    int64 `json:"max_staleness"`
	PendingGroups   int   `json:"pending_groups"`
	// Standby is the id of the replay-buffer whose lease this one waits for (empty once it holds it).
	Standby string `json:"standby_behind,omitempty"`
	// DroppedStaleByTask splits DroppedStale and Baseline by task family, and BatchedByTask splits Batched. Next to each
	// other they show whether the staleness bound takes a family's successes, or its long episodes, more
	// often than the rest (which would bias what the trainer sees of it).
	DroppedStaleByTask map[string]Tally `json:"dropped_stale_by_task,omitempty"`
	BatchedByTask      map[string]Tally `json:"batched_by_task,omitempty"`
}

// Tally counts one family's episodes, the successful among them and their turns, and the groups they
// came in: Mixed counts the groups some but not all of whose members counted here won, the groups GRPO
// has an outcome to learn from.
type Tally struct {
	Episodes int64 `json:"episodes"`
	Won      int64 `json:"won"`
	Turns    int64 `json:"turns"`
	Groups   int64 `json:"groups"`
	Mixed    int64 `json:"mixed"`
}

func (t *Tally) add(ep *proto.Episode) {
	t.Episodes++
	t.Turns += int64(len(ep.Turns))
	if ep.Success() {
		t.Won++
	}
}

// closeGroup makes a tally of one group's members (added since a zero Tally) count that group.
func (t *Tally) closeGroup() {
	if t.Episodes == 0 {
		return
	}
	t.Groups = 1
	if t.Won > 0 && t.Won < t.Episodes {
		t.Mixed = 1
	}
}

// addTally adds t to m[task], making m if it is nil.
func addTally(m *map[string]Tally, task string, t Tally) {
	if *m == nil {
		*m = map[string]Tally{}
	}
	sum := (*m)[task]
	sum.Episodes, sum.Won, sum.Turns = sum.Episodes+t.Episodes, sum.Won+t.Won, sum.Turns+t.Turns
	sum.Groups, sum.Mixed = sum.Groups+t.Groups, sum.Mixed+t.Mixed
	(*m)[task] = sum
}

// New validates the configuration and builds the buffer.
func New(cfg Config, deps Deps) (*Buffer, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Conn == nil {
		return nil, errors.New("replay-buffer: Deps.Conn is required")
	}
	if bus.Buffered(deps.Conn) {
		// A batch kept through a disconnect would be sent when the connection returns, which may be after
		// another buffer took the lease over and batched the same episodes.
		return nil, errors.New("replay-buffer: Deps.Conn keeps publishes made while disconnected to send them on reconnect; connect with bus.Unbuffered")
	}
	b := &Buffer{cfg: cfg, deps: deps, groups: map[string]*group{}, readyIDs: map[string]*group{}, released: map[string]struct{}{}, pace: newPace()}
	b.version.Store(-1)
	b.episodes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_replay_episodes_total", Help: "Episodes received, by task and outcome."}, []string{"task", "outcome"})
	b.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_replay_dropped_total", Help: "Episodes that will not train, by reason."}, []string{"reason"})
	b.batches = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_batches_total", Help: "Batches released."})
	b.staleness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrl_replay_staleness_versions", Help: "Staleness of batched episodes at release, in versions.", Buckets: prometheus.LinearBuckets(0, 1, 10)})
	b.pending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetrl_replay_pending_groups", Help: "Groups held, complete or not."})
	b.orphanedGroups = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_groups_orphaned_total", Help: "Groups released before their timeout because their rollout replica no longer plays them."})
	b.silences = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_replica_silences_total", Help: "Times a rollout replica went without a heartbeat for longer than the replica timeout."})
	b.refundErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_refund_errors_total", Help: "Failed refunds of admissions to the staleness gate (each is retried until it succeeds)."})
	b.closeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_closed_mark_errors_total", Help: "Failed writes of the admission closed mark (rollouts then stop stale episodes only at the next version)."})
	b.badHeartbeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_heartbeats_malformed_total", Help: "Rollout heartbeats that could not be decoded or validated."})
	b.claimsAnnounced = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetrl_replay_claims_announced_total", Help: "Group start markers published for rollout instances that went silent between an admission claim and its marker."})
	if deps.Metrics != nil {
		for _, c := range []prometheus.Collector{b.episodes, b.dropped, b.batches, b.staleness, b.pending, b.orphanedGroups, b.badHeartbeats, b.silences, b.closeErrors, b.refundErrors, b.claimsAnnounced} {
			if err := deps.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("replay-buffer metrics: %w", err)
			}
		}
	}
	return b, nil
}

// ID is the buffer's id (Config.ID, or the random one it took).
func (b *Buffer) ID() string { return b.cfg.ID }

// Running reports whether the buffer is consuming.
func (b *Buffer) Running() bool { return b.running.Load() }

// Version is the policy version the buffer last saw (-1 before the first).
func (b *Buffer) Version() int64 { return b.version.Load() }

// Stats returns a copy of the counters.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.DroppedStaleByTask, s.BatchedByTask = maps.Clone(b.stats.DroppedStaleByTask), maps.Clone(b.stats.BatchedByTask)
	return s
}

func (b *Buffer) count(f func(*Stats)) {
	b.mu.Lock()
	f(&b.stats)
	b.mu.Unlock()
}

// Run consumes episodes until ctx ends. All state changes happen on this goroutine.
func (b *Buffer) Run(ctx context.Context) error {
	log := b.deps.Log.With().Str("replay_buffer", b.cfg.ID).Logger()
	js, err := bus.JetStream(b.deps.Conn)
	if err != nil {
		return err
	}
	counter, err := admission.Bind(ctx, js)
	if err != nil {
		return err
	}
	svc, err := service.Announce(b.deps.Conn, "replay-buffer", b.cfg.ID, func() any { return b.Stats() })
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	leaseKV, err := js.KeyValue(ctx, proto.BucketLeases)
	if err != nil {
		return fmt.Errorf("replay-buffer lease: kv %s: %w", proto.BucketLeases, err)
	}
	ls, err := acquireLease(ctx, leaseKV, b.cfg.ID, b.cfg.LeaseTTL, log, func(holder string) { b.count(func(s *Stats) { s.Standby = holder }) })
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while standing by
		}
		return err
	}
	defer func() {
		if err := ls.release(); err != nil {
			log.Warn().Err(err).Msg("replay-buffer lease not released: another buffer waits for it to lapse")
		}
	}()
	// Read under the lease: the buffer before this one has stopped writing records.
	if b.refundKV, err = js.KeyValue(ctx, proto.BucketRefunds); err != nil {
		return fmt.Errorf("replay-buffer: kv %s: %w", proto.BucketRefunds, err)
	}
	// This run becomes the counter's refund owner before the records are read by it: a pass of the buffer
	// before this one can no longer be applied (and the one it may have numbered last is dead).
	a, err := counter.FenceHeld(ctx, ls.value)
	if err != nil {
		return fmt.Errorf("replay-buffer: fence the admission counter: %w", err)
	}
	b.applied, b.owner = a.RefundPass, ls.value
	if b.prior, err = loadRefunds(ctx, b.refundKV, a.RefundPass, a.DeadPasses, log); err != nil {
		return fmt.Errorf("replay-buffer: read the refund records: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamEpisodes,
		bus.ConsumerConfig(proto.ConsumerReplayBuffer, proto.SubjectEpisodesAll, proto.MaxUnackedEpisodes, ackWait))
	if err != nil {
		return fmt.Errorf("replay-buffer consumer: %w", err)
	}
	// Heartbeats are taken on the subscription's goroutine, so a busy run loop does not age them.
	beats, err := b.deps.Conn.Subscribe(proto.SubjectRolloutHeartbeat, func(m *nats.Msg) { b.heartbeat(m, time.Now(), log) })
	if err != nil {
		return fmt.Errorf("replay-buffer heartbeat subscription: %w", err)
	}
	defer func() { _ = beats.Unsubscribe() }()

	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	newVersion := make(chan struct{}, 1)
	go func() {
		watchDone <- bus.WatchPolicyVersion(watchCtx, js, log, func(rec proto.PolicyVersion) {
			b.pace.applied(rec, time.Now())
			b.version.Store(rec.Version)
			select {
			case newVersion <- struct{}{}:
			default:
			}
		})
	}()
	watchEnded := false // its error read by the loop below
	defer func() {
		stopWatch()
		if !watchEnded {
			<-watchDone
		}
	}()

	// Every subject of the stream: each rollout instance's, and the one older releases publish on.
	starts, err := js.CreateOrUpdateConsumer(ctx, proto.StreamGroups,
		bus.ConsumerConfig(proto.ConsumerReplayBufferGroups, "", 1<<15, ackWait))
	if err != nil {
		return fmt.Errorf("replay-buffer group-start consumer: %w", err)
	}

	msgs := make(chan jetstream.Msg, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done(): // not acked: redelivered to the next run
		}
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("replay-buffer consume: %w", err)
	}
	defer cc.Stop()
	startMsgs := make(chan jetstream.Msg, 64)
	sc, err := starts.Consume(func(m jetstream.Msg) {
		select {
		case startMsgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("replay-buffer consume group starts: %w", err)
	}
	defer sc.Stop()

	b.read = cons.CachedInfo().AckFloor.Stream
	if cons.CachedInfo().NumAckPending > 0 || starts.CachedInfo().NumAckPending > 0 {
		b.redeliveryUntil = time.Now().Add(ackWait)
	}
	episodes, err := js.Stream(ctx, proto.StreamEpisodes)
	if err != nil {
		return fmt.Errorf("replay-buffer: %w", err)
	}
	groupStarts, err := js.Stream(ctx, proto.StreamGroups)
	if err != nil {
		return fmt.Errorf("replay-buffer: %w", err)
	}
	lastSeq := func() (uint64, error) {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		info, err := episodes.Info(ictx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	}

	b.heardSince, b.claimsAt, b.reconnects = time.Now(), time.Now(), b.deps.Conn.Stats().Reconnects
	b.running.Store(true)
	defer b.running.Store(false)
	log.Info().Int("batch", b.cfg.BatchSize).Int("eta", b.cfg.Eta).Int("max_queued", b.cfg.MaxQueued).Msg("replay-buffer started")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	renewTick := time.NewTicker(b.cfg.LeaseTTL / 5)
	defer renewTick.Stop()
	lastKeep := time.Now()
	var recheck <-chan time.Time
	backoff := queueRecheck
	for {
		select {
		case <-ctx.Done():
			log.Info().Interface("stats", b.Stats()).Msg("replay-buffer stopped")
			return nil
		case m := <-msgs:
			b.receive(ctx, js, m, log)
		case m := <-startMsgs:
			b.receiveStart(ctx, js, m, log)
		case err := <-watchDone:
			// The watch ends on its own only when it fails or its bucket's updates close: without it the
			// buffer would go on composing for a version that no longer moves. It stops, visibly, and its
			// supervisor restarts it; what it holds is unacked and comes again.
			watchEnded = true
			if ctx.Err() != nil {
				log.Info().Interface("stats", b.Stats()).Msg("replay-buffer stopped")
				return nil
			}
			if err == nil {
				err = errors.New("the key-value watch closed its updates")
			}
			log.Error().Err(err).Msg("policy version watch ended: stopping the replay-buffer")
			return fmt.Errorf("replay-buffer: policy version watch ended: %w", err)
		case <-recheck:
		case <-newVersion:
			backoff = queueRecheck
		case now := <-tick.C:
			if n := b.deps.Conn.Stats().Reconnects; n != b.reconnects || !b.deps.Conn.IsConnected() {
				b.reconnects, b.heardSince = n, now // heartbeats sent meanwhile were not heard
			}
			b.checkGap(now, log)
			b.timeout(now, lastSeq, log)
			if now.Sub(lastKeep) >= ackWait/3 {
				b.keepAlive()
				lastKeep = now
			}
		case <-renewTick.C:
			if err := ls.renew(ctx); err != nil && ctx.Err() == nil {
				if errors.Is(err, ErrFenced) {
					log.Error().Err(err).Msg("replay-buffer fenced: stopping")
					return err
				}
				if ls.lapsed() {
					// Another buffer may hold it by now: this one stops, and stands by once restarted.
					log.Error().Err(err).Msg("replay-buffer lease lapsed: stopping")
					return fmt.Errorf("replay-buffer: lease unrenewed for %v: %w", b.cfg.LeaseTTL, err)
				}
				log.Warn().Err(err).Msg("replay-buffer lease not renewed")
			}
		}
		// Batches, refunds and the closed mark are written only under a lease renewed within half its ttl,
		// and by then: another buffer cannot take it over before. While it is not, the renewals say why.
		// Nothing is tried while the connection is down either: it keeps nothing to send later, so each
		// write would fail at once.
		if ls.hold() != nil || !b.deps.Conn.IsConnected() {
			continue
		}
		if now := time.Now(); now.Sub(b.claimsAt) >= b.cfg.claimsEvery() {
			b.claimsAt = now
			wctx, endWrites := context.WithDeadline(ctx, ls.writeBy())
			b.recoverClaims(wctx, js, counter, groupStarts, now, log)
			b.refreshRecords(wctx, counter, now)
			endWrites()
			if b.passMoved != nil {
				log.Error().Err(b.passMoved).Msg("another replay-buffer gives admissions back: stopping")
				return fmt.Errorf("replay-buffer: %w: %w", ErrFenced, b.passMoved)
			}
		}
		if b.releaseDue() || len(b.unsettled) > 0 {
			wctx, endWrites := context.WithDeadline(ctx, ls.writeBy())
			if err := b.release(wctx, js, counter, log); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("release batch")
			}
			if len(b.unsettled) > 0 {
				b.settle(wctx, counter, nil)
			}
			endWrites()
			if b.passMoved != nil {
				log.Error().Err(b.passMoved).Msg("another replay-buffer gives admissions back: stopping")
				return fmt.Errorf("replay-buffer: %w: %w", ErrFenced, b.passMoved)
			}
		}
		recheck = nil
		if b.held {
			b.readyChanged = true // look again even if nothing arrives
			wait := backoff
			if !b.wakeAt.IsZero() {
				wait = max(min(wait, time.Until(b.wakeAt)), recheckFloor)
			}
			recheck = time.After(wait)
			backoff = min(2*backoff, queueRecheckMax)
		} else {
			backoff = queueRecheck
		}
		b.pending.Set(float64(len(b.groups) + len(b.ready)))
	}
}

func (b *Buffer) receive(ctx context.Context, js jetstream.JetStream, m jetstream.Msg, log zerolog.Logger) {
	if md, err := m.Metadata(); err == nil {
		b.received(md.Sequence.Stream)
	}
	var ep proto.Episode
	err := codec.Unmarshal(m.Data(), &ep)
	if err == nil {
		err = ep.Validate()
	}
	if err != nil {
		b.refuse(ctx, js, m, "episode", err, log)
		return
	}
	b.count(func(s *Stats) { s.Received++ })
	if _, done := b.released[ep.GroupID]; done {
		// A redelivery of a batched episode, or a member that arrived after its group timed out.
		b.count(func(s *Stats) { s.Late++ })
		b.episodes.WithLabelValues(ep.Task, "late").Inc()
		_ = m.Ack()
		return
	}
	if g := b.readyIDs[ep.GroupID]; g != nil {
		held, dup := g.members[ep.ID]
		switch {
		case dup && sameStreamMessage(held.msg, m):
			g.members[ep.ID] = member{ep: held.ep, msg: m} // a redelivery: its newest delivery is the one to ack
		case dup:
			b.count(func(s *Stats) { s.Duplicates++ })
			b.episodes.WithLabelValues(ep.Task, "duplicate").Inc()
			_ = m.Ack()
		default:
			// A member that arrived after its group timed out, whose admission may already be given back:
			// the group is decided without it.
			b.count(func(s *Stats) { s.Late++ })
			b.episodes.WithLabelValues(ep.Task, "late").Inc()
			_ = m.Ack()
		}
		return
	}
	g := b.groups[ep.GroupID]
	if g != nil && ep.GroupSize != g.size {
		// Its group's size decides the admissions given back for it: a member that disagrees with the size
		// its group was opened with cannot be accounted for.
		b.refuse(ctx, js, m, "episode", fmt.Errorf("%w: episode %s says group %s has %d members; the group has %d",
			proto.ErrMalformed, ep.ID, g.id, ep.GroupSize, g.size), log)
		return
	}
	if g == nil {
		g = &group{id: ep.GroupID, task: ep.Task, rollout: ep.RolloutID, size: ep.GroupSize, startVersion: ep.StartVersion, members: map[string]member{}, firstSeen: time.Now()}
		b.recoverRefund(g)
		b.groups[ep.GroupID] = g
	}
	if held, dup := g.members[ep.ID]; dup {
		if sameStreamMessage(held.msg, m) {
			// A redelivery of the message held: keep the newest delivery, whose ack the server expects.
			g.members[ep.ID] = member{ep: held.ep, msg: m}
			return
		}
		// Another message with the same episode id (published outside the dedup window): it adds nothing.
		b.count(func(s *Stats) { s.Duplicates++ })
		b.episodes.WithLabelValues(ep.Task, "duplicate").Inc()
		_ = m.Ack()
		return
	}
	g.members[ep.ID] = member{ep: ep, msg: m}
	g.seed = ep.Seed
	b.episodes.WithLabelValues(ep.Task, "received").Inc()
	if len(g.members) >= g.size {
		b.makeReady(g)
	}
}

// maxAbove bounds the sequences held past a gap; beyond it the gap is passed at once.
const maxAbove = 1 << 20

// received advances read over the episodes stream sequence seq. In order, as nearly always, it reads no
// clock.
func (b *Buffer) received(seq uint64) {
	switch {
	case seq <= b.read:
		return // a redelivery
	case seq == b.read+1 && len(b.above) == 0:
		b.read = seq
		return
	case seq == b.read+1:
		b.read = seq
		b.fill(time.Now())
		return
	}
	if b.above == nil {
		b.above = map[uint64]struct{}{}
	}
	b.above[seq] = struct{}{}
	if b.gapSince.IsZero() {
		b.gapSince = time.Now()
	}
	if len(b.above) > maxAbove {
		b.passGap(time.Now())
	}
}

// fill moves read over the sequences held past it, and restarts the gap clock at now if a gap is left.
func (b *Buffer) fill(now time.Time) {
	for {
		if _, ok := b.above[b.read+1]; !ok {
			break
		}
		delete(b.above, b.read+1)
		b.read++
	}
	b.gapSince = time.Time{}
	if len(b.above) > 0 {
		b.gapSince = now
	}
}

// passGap gives up on the lowest gap: read moves to just below the lowest sequence held past it.
func (b *Buffer) passGap(now time.Time) {
	low := uint64(0)
	for seq := range b.above {
		if low == 0 || seq < low {
			low = seq
		}
	}
	if low == 0 {
		return
	}
	b.read = low - 1
	b.fill(now)
}

// checkGap passes a gap that redelivery has not filled within twice ackWait.
func (b *Buffer) checkGap(now time.Time, log zerolog.Logger) {
	if len(b.above) == 0 || now.Sub(b.gapSince) <= 2*ackWait {
		return
	}
	from := b.read
	b.passGap(now)
	log.Warn().Uint64("after", from).Uint64("read", b.read).Msg("episodes stream gap not redelivered; passed")
}

// makeReady moves a complete or timed-out group from the open groups to the ready list.
func (b *Buffer) makeReady(g *group) {
	delete(b.groups, g.id)
	b.readyIDs[g.id] = g
	b.ready, b.readyChanged = append(b.ready, g), true
}

// refuse dead-letters a message that cannot be decoded or validated, counting it.
func (b *Buffer) refuse(ctx context.Context, js jetstream.JetStream, m jetstream.Msg, what string, err error, log zerolog.Logger) {
	b.count(func(s *Stats) { s.DeadLettered++ })
	b.dropped.WithLabelValues("malformed").Inc()
	log.Error().Err(err).Str("subject", m.Subject()).Msg(what + " refused; dead-lettered")
	if err := bus.DeadLetter(ctx, js, "replay-buffer", m, err); err != nil {
		log.Error().Err(err).Msg("dead-letter failed; message will be redelivered")
	}
}

// receiveStart takes a group's start marker: a group not seen yet is opened (its timeout counts from now),
// so if its members never arrive it still times out and its admissions are refunded.
func (b *Buffer) receiveStart(ctx context.Context, js jetstream.JetStream, m jetstream.Msg, log zerolog.Logger) {
	var gs proto.GroupStart
	err := codec.Unmarshal(m.Data(), &gs)
	if err == nil {
		err = gs.Validate()
	}
	if err != nil {
		b.refuse(ctx, js, m, "group start", err, log)
		return
	}
	if _, done := b.released[gs.GroupID]; done {
		_ = m.Ack() // the group was settled before its marker was read
		return
	}
	g := b.groups[gs.GroupID]
	if g == nil {
		g = b.readyIDs[gs.GroupID] // its members were all read before its marker
	}
	if g != nil && gs.GroupSize != g.size {
		b.refuse(ctx, js, m, "group start", fmt.Errorf("%w: group start %s has %d members; its members say %d",
			proto.ErrMalformed, gs.GroupID, gs.GroupSize, g.size), log)
		return
	}
	if g == nil {
		b.count(func(s *Stats) { s.GroupStarts++ })
		g = &group{id: gs.GroupID, task: gs.Task, rollout: gs.RolloutID, size: gs.GroupSize, startVersion: gs.StartVersion, members: map[string]member{}, firstSeen: time.Now(), marker: m}
		b.recoverRefund(g)
		b.groups[gs.GroupID] = g
		return
	}
	if g.marker != nil && !sameStreamMessage(g.marker, m) {
		_ = m.Ack() // a second marker of one group adds nothing
		return
	}
	if g.marker == nil {
		b.count(func(s *Stats) { s.GroupStarts++ })
	}
	if g.rollout == "" {
		g.rollout = gs.RolloutID // a member read first that did not name its replica
	}
	g.marker = m // the newest delivery is the one the server expects acked
}

// keepAlive extends the ack deadline of every episode and marker held.
func (b *Buffer) keepAlive() {
	for g := range b.heldGroups() {
		for _, m := range g.members {
			_ = m.msg.InProgress()
		}
		if g.marker != nil {
			_ = g.marker.InProgress()
		}
	}
}

// heldGroups yields every group the buffer holds unacked: open, ready, and settled but unsettled (a failed refund).
func (b *Buffer) heldGroups() iter.Seq[*group] {
	return func(yield func(*group) bool) {
		for _, g := range b.groups {
			if !yield(g) {
				return
			}
		}
		for _, g := range b.ready {
			if !yield(g) {
				return
			}
		}
		for _, t := range b.unsettled {
			if !yield(t.g) {
				return
			}
		}
	}
}

// sameStreamMessage reports whether two deliveries are of one stream message.
func sameStreamMessage(a, b jetstream.Msg) bool {
	ma, errA := a.Metadata()
	mb, errB := b.Metadata()
	return errA == nil && errB == nil && ma.Stream == mb.Stream && ma.Sequence.Stream == mb.Sequence.Stream
}

// timeout moves groups that have waited too long for missing members to the ready list: after the group
// timeout, or sooner when their rollout replica no longer plays them (see orphaned).
func (b *Buffer) timeout(now time.Time, lastSeq func() (uint64, error), log zerolog.Logger) {
	var seq uint64
	var seqErr error
	fetched := false
	once := func() (uint64, error) { // one stream info per tick at most
		if !fetched {
			seq, seqErr = lastSeq()
			fetched = true
		}
		return seq, seqErr
	}
	for id, g := range b.groups {
		switch {
		case now.Sub(g.firstSeen) > b.cfg.GroupTimeout:
			log.Warn().Str("group", id).Int("have", len(g.members)).Int("want", g.size).Msg("group timed out; releasing what arrived")
			b.makeReady(g)
		case b.orphaned(g, now, once, log):
			log.Warn().Str("group", id).Str("rollout", g.rollout).Int("have", len(g.members)).Int("want", g.size).
				Msg("group's rollout replica no longer plays it; releasing what arrived")
			b.count(func(s *Stats) { s.Orphaned++ })
			b.orphanedGroups.Inc()
			b.makeReady(g)
		}
	}
	if b.cfg.ReplicaTimeout > 0 {
		for _, id := range b.live.silenced(now, b.cfg.ReplicaTimeout) {
			log.Warn().Str("rollout", id).Dur("silent_for", b.cfg.ReplicaTimeout).
				Msg("rollout replica silent; its open groups wait for their group timeout or its return")
			b.count(func(s *Stats) { s.Silences++ })
			b.silences.Inc()
		}
		b.live.prune(now, 2*b.cfg.ReplicaTimeout, b.cfg.GroupTimeout+b.cfg.ReplicaTimeout)
	}
}

// orphaned reports whether an open group's members that have not arrived never will, before its group
// timeout: its rollout replica is beating and its heartbeats have not listed the group for ReplicaTimeout
// (counted from when the buffer first saw the group if that is later): it finished the group, or restarted
// under the same id without it. Silence is not evidence: a replica cut off from NATS may still hold members
// to publish, and a buffer cut off hears no heartbeats at all, so a group of a replica that has not beaten
// in the last ReplicaTimeout/4 waits (for the group timeout, if the replica died for good). The buffer also
// must have read the episodes stream as far as it reached once the replica had been beating without the
// group for a while, and the replica must have gone on beating without it for ReplicaTimeout/4 since: every
// member the replica published is stored by then, and every message up to the cutoff has reached the
// buffer (not only the last: a delivery lost in flight comes back later), so a member still missing is not
// waiting to be read behind others. A group of a replica never heard from, and any group while a previous
// buffer's episodes are being redelivered, waits for the group timeout.
func (b *Buffer) orphaned(g *group, now time.Time, lastSeq func() (uint64, error), log zerolog.Logger) bool {
	if b.cfg.ReplicaTimeout <= 0 || now.Before(b.redeliveryUntil) {
		return false
	}
	listed, beat, heard := b.live.lastListed(g.rollout, g.id)
	if !heard {
		return false
	}
	if !listed.Equal(g.listedAt) {
		g.listedAt, g.cutoffSet = listed, false // listed again since the cutoff was taken
	}
	unlisted := now.Sub(listed)
	if g.firstSeen.After(listed) {
		unlisted = now.Sub(g.firstSeen) // the replica was alive when it admitted the group
	}
	quarter := b.cfg.ReplicaTimeout / 4
	if unlisted <= quarter || now.Sub(beat) > quarter {
		g.cutoffSet = false // not (or no longer) beating without the group: no evidence yet
		return false
	}
	if !g.cutoffSet {
		seq, err := lastSeq()
		if err != nil {
			log.Warn().Err(err).Msg("episodes stream info; no group released on a heartbeat this tick")
			return false
		}
		g.cutoff, g.cutoffSet, g.cutoffAt = seq, true, now
	}
	return unlisted > b.cfg.ReplicaTimeout && now.Sub(g.cutoffAt) >= quarter && b.read >= g.cutoff
}

// heartbeat takes a rollout replica's list of the groups it still plays.
func (b *Buffer) heartbeat(m *nats.Msg, now time.Time, log zerolog.Logger) {
	var hb proto.RolloutHeartbeat
	err := codec.Unmarshal(m.Data, &hb)
	if err == nil {
		err = hb.Validate()
	}
	if err != nil {
		b.count(func(s *Stats) { s.BadHeartbeats++ })
		b.badHeartbeats.Inc()
		log.Warn().Err(err).Int("bytes", len(m.Data)).Msg("rollout heartbeat ignored")
		return
	}
	if silent, was := b.live.beat(hb, now); was {
		log.Info().Str("rollout", hb.RolloutID).Dur("silent_for", silent.Round(time.Millisecond)).Msg("rollout replica heard again")
	}
}

// liveness is what rollout heartbeats said: when each replica last beat, and when each group was last
// listed. The heartbeat subscription writes it; the run loop reads it.
type liveness struct {
	mu        sync.Mutex
	beats     map[string]time.Time // rollout replica id -> its last heartbeat
	listed    map[string]time.Time // group id -> the last heartbeat that listed it
	quiet     map[string]bool      // replicas counted silent and not heard since
	instances map[string]time.Time // rollout instance (RolloutHeartbeat.Instance) -> its last heartbeat
}

// beat records a heartbeat; when its replica had been counted silent, it says for how long it was.
func (l *liveness) beat(hb proto.RolloutHeartbeat, now time.Time) (silent time.Duration, wasSilent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beats == nil {
		l.beats, l.listed, l.quiet, l.instances = map[string]time.Time{}, map[string]time.Time{}, map[string]bool{}, map[string]time.Time{}
	}
	if hb.Instance != "" {
		l.instances[hb.Instance] = now
	}
	if l.quiet[hb.RolloutID] {
		delete(l.quiet, hb.RolloutID)
		silent, wasSilent = now.Sub(l.beats[hb.RolloutID]), true
	}
	l.beats[hb.RolloutID] = now
	for _, id := range hb.Groups {
		l.listed[id] = now
	}
	return silent, wasSilent
}

// silenced returns the replicas that have gone without a heartbeat for longer than after since they were
// last found silent (each once per silence).
func (l *liveness) silenced(now time.Time, after time.Duration) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, t := range l.beats {
		if now.Sub(t) > after && !l.quiet[id] {
			l.quiet[id] = true
			out = append(out, id)
		}
	}
	return out
}

// lastListed is when replica rollout last listed group id in a heartbeat (the Unix epoch if it never did, or
// not within the time liveness remembers) and when it last beat; heard is false when the replica has not
// beaten since the buffer started (or not within the time liveness remembers).
func (l *liveness) lastListed(rollout, id string) (last, beat time.Time, heard bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	beat, heard = l.beats[rollout]
	if !heard {
		return time.Time{}, time.Time{}, false
	}
	last, ok := l.listed[id]
	if !ok {
		return time.Unix(0, 0), beat, true
	}
	return last, beat, true
}

// silentFor reports whether rollout instance has gone without a heartbeat for longer than after, counted
// from since (when the buffer last began to hear heartbeats) if it was not heard after that.
func (l *liveness) silentFor(instance string, now, since time.Time, after time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := since
	if t, ok := l.instances[instance]; ok && t.After(since) {
		last = t
	}
	return now.Sub(last) > after
}

// pruneInstances forgets the instances silent for longer than after.
func (l *liveness) pruneInstances(now time.Time, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.instances, func(_ string, t time.Time) bool { return now.Sub(t) > after })
}

// prune forgets groups not listed for longer than groups, and replicas silent for longer than replicas.
func (l *liveness) prune(now time.Time, groups, replicas time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.listed, func(_ string, t time.Time) bool { return now.Sub(t) > groups })
	maps.DeleteFunc(l.beats, func(_ string, t time.Time) bool { return now.Sub(t) > replicas })
	maps.DeleteFunc(l.quiet, func(id string, _ bool) bool { _, ok := l.beats[id]; return !ok })
}

// release publishes one batch when the ready groups hold at least BatchSize usable episodes (taking every
// ready group up to MaxBatchSize), and settles groups that cannot train (too few usable members). While it
// waits for more, it still gives the staleness gate back the admissions of everything that will never
// train: otherwise a replica killed with groups open (their missing members) could hold the gate shut with
// too few usable episodes ready for a batch, and nothing would move again.
func (b *Buffer) release(ctx context.Context, js jetstream.JetStream, counter *admission.Counter, log zerolog.Logger) error {
	if !b.releaseDue() {
		return nil
	}
	seen := b.version.Load()
	b.held, b.wakeAt = false, time.Time{}
	b.sortReady()
	v := seen
	take, keep, usable, full := b.compose(v)
	wait := usable > 0 && usable < b.cfg.BatchSize && !full // not enough yet: decide again with more groups or a new version
	if !wait && usable > 0 {
		ahead, full := b.queued(ctx, js, log)
		switch {
		case full && !b.composeAhead(ahead, seen+int64(ahead), time.Now()):
			b.held, wait = true, true // the trainer has enough queued: compose this batch when it can go straight on
		case ahead > 0:
			// The batch trains after those ahead of it: its staleness is counted at that version.
			v = seen + int64(ahead)
			take, keep, usable, full = b.compose(v)
			wait = usable > 0 && usable < b.cfg.BatchSize && !full
		}
	}
	if !wait && usable > 0 && b.cut(v, log) {
		b.sortReady()
		take, keep, usable, _ = b.compose(v)
	}
	if wait {
		// Groups with nothing to train (every member masked or stale, or too few left) never will have:
		// they are settled now, so that their admissions go back to the staleness gate instead of holding
		// it shut while the buffer waits for usable episodes that only that room would let start.
		// The same holds for the members of a waiting group that will never train (missing after its
		// timeout, masked, stale): their admissions are given back now, and settle gives back the rest.
		var none, waiting []settled
		var rest []*group
		for _, t := range take {
			if t.ok == nil {
				none = append(none, t)
				continue
			}
			waiting = append(waiting, t)
			rest = append(rest, t.g)
		}
		gave := b.giveBack(ctx, counter, waiting) // what a waiting group owes: only stale members can add to it
		b.settle(ctx, counter, none)
		b.ready = append(rest, keep...)
		if !b.held && gave { // else look again on the next pass: that room may be what the gate waits for
			b.readyChanged, b.checkedAt = false, seen
		}
		return nil
	}
	var eps []proto.Episode
	for _, t := range take {
		eps = append(eps, t.ok...)
	}
	for _, t := range take {
		eps = append(eps, t.base...)
	}
	if len(eps) > 0 {
		if err := b.publish(ctx, js, eps, usable, v); err != nil {
			return err
		}
		b.close(ctx, counter, v, log)
	}
	b.settle(ctx, counter, take)
	b.ready = keep
	return nil
}

// releaseDue reports whether release has anything to decide: groups are ready, a version is known, and
// the ready groups or the version changed since it last found too few usable episodes.
func (b *Buffer) releaseDue() bool {
	seen := b.version.Load()
	return seen >= 0 && len(b.ready) > 0 && (b.readyChanged || seen != b.checkedAt)
}

// close raises the admission closed mark (proto.AdmissionClosed) after a batch for version v: it was the
// last batch that could take a group admitted at v - Eta, so the rollouts can stop the members of such
// groups still playing. Judging each turn (TurnStaleness), a later batch can still take an older group's
// recent turns: no mark then. A failed write is logged and counted; the next batch writes a higher mark.
func (b *Buffer) close(ctx context.Context, counter *admission.Counter, v int64, log zerolog.Logger) {
	if b.cfg.TurnStaleness {
		return
	}
	below := v - int64(b.cfg.Eta) + 1
	if err := counter.Close(ctx, below); err != nil {
		b.closeErrors.Inc()
		log.Warn().Err(err).Int64("below", below).Msg("admission closed mark not written")
	}
}

// sortReady puts the oldest admissions first: they are the nearest to the staleness bound. Groups of one
// admission version go by their instance (seed, task, id), not by the order they finished in: the groups
// of a batch come in the same order whenever they are played, and so do the trainer's sums over them.
func (b *Buffer) sortReady() {
	slices.SortFunc(b.ready, func(x, y *group) int {
		return cmp.Or(cmp.Compare(x.startVersion, y.startVersion), cmp.Compare(x.seed, y.seed),
			cmp.Compare(x.task, y.task), cmp.Compare(x.id, y.id))
	})
}

// compose goes through the ready groups (sorted, oldest admission first) as a batch composed for trainer
// version v would: the groups it takes (with their usable members at v, nil when too few), the groups left
// for a later batch, and the usable episodes taken.
func (b *Buffer) compose(v int64) (take []settled, keep []*group, usable int, full bool) {
	size := 0
	for _, g := range b.ready {
		ok, base, masked, stale := b.split(g, v)
		if len(ok) == 0 || len(ok)+len(base) < b.cfg.MinGroup {
			ok, base = nil, nil
		}
		n, over := 0, false
		if ok != nil {
			n = g.wireBytes(ok) + g.wireBytes(base)
			if over = n > batchBudget; over {
				ok, base = nil, nil // no batch can carry it: settled as a group that cannot train
			}
		}
		if usable >= b.cfg.BatchSize && usable+len(ok) > b.cfg.MaxBatchSize {
			keep = append(keep, g)
			continue
		}
		if ok != nil && size+n > batchBudget {
			// It would take the batch past the byte limit: it goes in the next one, and this one goes with
			// what it has (waiting for more groups would not let it grow).
			keep, full = append(keep, g), true
			continue
		}
		usable += len(ok)
		size += n
		take = append(take, settled{g: g, ok: ok, base: base, masked: masked, stale: stale, oversized: over})
	}
	return take, keep, usable, full
}

// batchBudget bounds the encoded episodes of one batch, so that the batch, and the train batch the
// advantage-normalizer makes of it (each turn's advantage added), fit proto.MaxBatchBytes; the rest is
// left for the batches' headers and per-task statistics.
const batchBudget = proto.MaxBatchBytes - 64<<10

// wireBytes bounds what eps, members of g, add to a train batch: each one's message as published, a turn's
// advantage (a float64) and the train episode's framing.
func (g *group) wireBytes(eps []proto.Episode) int {
	n := 0
	for i := range eps {
		n += 8*len(eps[i].Turns) + 64
		if m, ok := g.members[eps[i].ID]; ok && m.msg != nil {
			n += len(m.msg.Data())
		}
	}
	return n
}

// composeAhead reports whether, with ahead batches queued, the next batch (for version v) is composed now
// anyway because the trainer's step is expected to end within Lead; when it is not yet time, it sets wakeAt
// to when it is. While a group that this batch is the last to take (admitted at v - Eta) is still open,
// that time is a quarter of Lead before the end instead: composing earlier would cut the group's time.
func (b *Buffer) composeAhead(ahead int, v int64, now time.Time) bool {
	if b.cfg.Lead <= 0 || ahead != b.cfg.MaxQueued {
		return false
	}
	end, ok := b.pace.stepEnd()
	if !ok {
		return false
	}
	lead := b.cfg.Lead
	if b.dueOpen(v) {
		lead /= 4
	}
	if at := end.Add(-lead); now.Before(at) {
		b.wakeAt = at
		return false
	}
	return true
}

// dueOpen reports whether a group admitted at v - Eta, which a batch for version v is the last to take, is
// still missing members.
func (b *Buffer) dueOpen(v int64) bool {
	for _, g := range b.groups {
		if g.startVersion == v-int64(b.cfg.Eta) {
			return true
		}
	}
	return false
}

// cut moves to the ready list the open groups that a batch for version v is the last to take (admitted
// at v - Eta) and that have enough members to train without those still playing (Config.Cut); it reports
// whether it moved any.
func (b *Buffer) cut(v int64, log zerolog.Logger) bool {
	if b.cfg.Cut <= 0 {
		return false
	}
	moved := false
	for _, g := range b.groups {
		if g.startVersion != v-int64(b.cfg.Eta) {
			continue
		}
		if ok, base, _, _ := b.split(g, v); len(ok) == 0 || len(ok)+len(base) < b.cfg.MinGroup || float64(len(g.members)) < b.cfg.Cut*float64(g.size) {
			continue
		}
		log.Debug().Str("group", g.id).Int("have", len(g.members)).Int("want", g.size).Int64("version", v).Msg("group cut at its last batch")
		g.cut = true
		b.makeReady(g)
		moved = true
	}
	return moved
}

// settled is a ready group as release decides on it: its usable members (nil when it cannot train), its
// stale members sent along for the baseline (TurnStaleness), how many of the others were masked, and the
// tally of the stale (those sent along among them).
type settled struct {
	g      *group
	ok     []proto.Episode
	base   []proto.Episode
	masked int
	stale  Tally
	// oversized says the group could train but no batch can carry it (batchBudget).
	oversized bool
}

// owed is how many of the group's admissions will not reach the trainer and have not been given back yet.
// Never below 0: a buffer that took over may have been told of more (GroupRefund) than the group now owes.
func (t settled) owed() int64 { return max(0, int64(t.g.size-len(t.ok)-len(t.base)-t.g.refunded)) }

// settle closes groups that are in a published batch or cannot train: it refunds the admissions of every
// member that will not reach the trainer, counts why, acks the members and the start marker, and
// remembers the group id (late and repeated members are then recognised).
func (b *Buffer) settle(ctx context.Context, counter *admission.Counter, ts []settled) {
	if len(b.unsettled) > 0 {
		ts = append(slices.Clip(b.unsettled), ts...)
		b.unsettled = nil
	}
	if !b.giveBack(ctx, counter, ts) {
		b.unsettled = ts // held unacked, tried again on the next pass
		return
	}
	for _, t := range ts {
		missing := t.g.size - len(t.g.members)
		small, oversized := 0, 0
		if t.ok == nil {
			small = len(t.g.members) - t.masked - int(t.stale.Episodes)
		}
		if t.oversized {
			small, oversized = 0, small
			b.deps.Log.Warn().Str("group", t.g.id).Str("task", t.g.task).Int("episodes", oversized).Int("limit_bytes", batchBudget).Msg("group too large for any batch; dropped")
		}
		stale := t.stale.Episodes - int64(len(t.base)) // those sent along are the trainer's to count
		b.count(func(s *Stats) {
			s.Masked += int64(t.masked)
			s.DroppedStale += stale
			s.Baseline += int64(len(t.base))
			if t.stale.Episodes > 0 {
				addTally(&s.DroppedStaleByTask, t.g.task, t.stale)
			}
			if t.ok != nil { // published (release settles a group that can train only after its batch)
				var batched Tally
				for i := range t.ok {
					batched.add(&t.ok[i])
				}
				batched.closeGroup()
				addTally(&s.BatchedByTask, t.g.task, batched)
			}
			if t.g.cut { // the members missing were still playing when the group was taken
				s.Cut += int64(missing)
			} else {
				s.Missing += int64(missing)
			}
			s.DroppedGroup += int64(small)
			s.Oversized += int64(oversized)
		})
		b.dropped.WithLabelValues("infra").Add(float64(t.masked))
		b.dropped.WithLabelValues("stale").Add(float64(stale))
		if t.g.cut {
			b.dropped.WithLabelValues("cut").Add(float64(missing))
		} else {
			b.dropped.WithLabelValues("missing").Add(float64(missing))
		}
		b.dropped.WithLabelValues("small-group").Add(float64(small))
		b.dropped.WithLabelValues("oversized").Add(float64(oversized))
		for _, m := range t.g.members {
			_ = m.msg.Ack()
		}
		if t.g.marker != nil {
			_ = t.g.marker.Ack()
		}
		delete(b.readyIDs, t.g.id)
		b.remember(t.g.id)
	}
}

// priorRefund is what a group's record said when the buffer started: the admissions given back, and the
// record's revision and time of writing.
type priorRefund struct {
	given int
	rev   uint64
	at    time.Time
}

// loadRefunds reads every GroupRefund record: the admissions given back so far by key (proto.RefundKey),
// the counter holding refund pass applied and dead passes dead. A record that does not decode is logged
// and skipped; one naming a pass that was not applied is written again without it (settleRecord).
func loadRefunds(ctx context.Context, kv jetstream.KeyValue, applied uint64, dead []uint64, log zerolog.Logger) (map[string]priorRefund, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := kv.WatchAll(wctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	out := map[string]priorRefund{}
	for {
		select {
		case e, open := <-w.Updates():
			if !open {
				return nil, errors.New("the watch of the refund records ended before every record was read")
			}
			if e == nil { // every record read
				if len(out) > 0 {
					log.Info().Int("groups", len(out)).Msg("refund records of earlier buffers read")
				}
				return out, nil
			}
			var r proto.GroupRefund
			if err := codec.Unmarshal(e.Value(), &r); err != nil || r.Refunded < 0 || r.Pending < 0 {
				log.Warn().Err(err).Str("key", e.Key()).Int("refunded", r.Refunded).Int("pending", r.Pending).Msg("refund record skipped")
				continue
			}
			prior, ok, err := settleRecord(wctx, kv, e.Key(), r, e.Revision(), e.Created(), applied, dead, log)
			if err != nil {
				return nil, err
			}
			if ok {
				out[e.Key()] = prior
			}
		case <-wctx.Done():
			return nil, wctx.Err()
		}
	}
}

// settleRecord is what record r, read at revision rev, says was given back. A record whose pass was not
// applied (it died with the buffer that wrote it) is written again without it, so that it keeps reading
// right once its pass leaves the dead passes; when that write conflicts (a lagging read, an expiry, the
// buffer before still writing) the record is read again and settled again. ok is false when the record is
// gone (still so after a few reads: a lagging replica may not have it yet) or no longer decodes (logged).
func settleRecord(ctx context.Context, kv jetstream.KeyValue, key string, r proto.GroupRefund, rev uint64, at time.Time, applied uint64, dead []uint64, log zerolog.Logger) (p priorRefund, ok bool, err error) {
	for try := 1; ; try++ {
		p = priorRefund{given: r.Given(applied, dead), rev: rev, at: at}
		if r.Applied(applied, dead) {
			return p, true, nil
		}
		data, err := codec.Marshal(proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: p.given}, 0)
		if err != nil {
			return p, false, err
		}
		if p.rev, err = kv.Update(ctx, key, data, rev); err == nil {
			p.at = time.Now()
			return p, true, nil
		}
		if !admission.IsConflict(err) || try == recordWrites {
			return p, false, fmt.Errorf("rewrite refund record %s of pass %d, not applied: %w", key, r.Pass, err)
		}
		var e jetstream.KeyValueEntry
		for reads := 1; ; reads++ {
			if err := retryPause(ctx); err != nil {
				return p, false, err
			}
			e, err = kv.Get(ctx, key)
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			if reads == 5 {
				return p, false, nil
			}
		}
		if err != nil {
			return p, false, err
		}
		r, rev, at = proto.GroupRefund{}, e.Revision(), e.Created()
		if err := codec.Unmarshal(e.Value(), &r); err != nil || r.Refunded < 0 || r.Pending < 0 {
			log.Warn().Err(err).Str("key", key).Int("refunded", r.Refunded).Int("pending", r.Pending).Msg("refund record skipped")
			return p, false, nil
		}
	}
}

// recoverRefund sets a group this buffer has just met to what an earlier buffer's record says it gave back
// for it (at most the group's size), once.
func (b *Buffer) recoverRefund(g *group) {
	if len(b.prior) == 0 {
		return
	}
	k := proto.RefundKey(g.id)
	n, ok := b.prior[k]
	if !ok {
		return
	}
	delete(b.prior, k)
	g.refunded, g.recordRev, g.recordAt = min(n.given, g.size), n.rev, n.at
	g.record = proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: n.given} // what it reads as
	b.count(func(s *Stats) { s.RefundsRecovered += int64(g.refunded) })
}

// refundPass is one numbered refund: what it gives back for each group.
type refundPass struct {
	pass   uint64
	shares []refundShare
}

type refundShare struct {
	g *group
	n int
}

// giveBack gives the staleness gate back what the groups of ts owe, as one numbered pass whose records
// are written first (a buffer dying between the two leaves records the next one can read right), and
// reports whether it was given (true when nothing is owed). A failure is logged and counted, and what it
// was for is tried again later: settle holds its groups unacked in unsettled, a waiting group owes it
// still when it settles. A pass whose write failed is settled by resolveDoubt before any other.
func (b *Buffer) giveBack(ctx context.Context, counter *admission.Counter, ts []settled) bool {
	if b.passMoved != nil || !b.resolveDoubt(ctx, counter) {
		return false
	}
	var p refundPass
	var total int64
	for _, t := range ts {
		if o := t.owed(); o > 0 {
			p.shares = append(p.shares, refundShare{g: t.g, n: int(o)})
			total += o
		}
	}
	if total == 0 {
		return true
	}
	p.pass = b.applied + 1
	if !b.recordPass(ctx, counter, p) {
		b.toRewrite(p) // some may be written: the pass will not be applied
		return false
	}
	err := counter.RefundPass(ctx, total, p.pass, b.applied, b.owner)
	if err == nil {
		b.passApplied(p)
		return true
	}
	b.refundErrors.Inc()
	b.count(func(s *Stats) { s.RefundErrors++ })
	var moved *admission.PassMovedError
	if errors.As(err, &moved) {
		// Only a buffer that lost its lease meets a pass it did not write, or another owner.
		b.toRewrite(p)
		b.passMoved = err
		return false
	}
	b.doubt = &p
	b.deps.Log.Warn().Err(err).Int64("admissions", total).Uint64("pass", p.pass).Msg("refund failed; tried again later")
	return false
}

// resolveDoubt finds whether the pass whose write failed was applied, and makes sure that one that was
// not never is (admission.Counter.Fence); it reports whether that is settled.
func (b *Buffer) resolveDoubt(ctx context.Context, counter *admission.Counter) bool {
	if b.doubt == nil {
		return true
	}
	err := counter.Fence(ctx, b.applied, b.owner)
	var moved *admission.PassMovedError
	switch {
	case err == nil: // not applied, and now never will be: its records are written again
		b.toRewrite(*b.doubt)
	case errors.As(err, &moved) && !moved.Taken && moved.Found == b.doubt.pass:
		b.passApplied(*b.doubt)
	case errors.As(err, &moved):
		b.passMoved = err
		return false
	default:
		b.deps.Log.Warn().Err(err).Uint64("pass", b.doubt.pass).Msg("refund pass still in doubt")
		return false
	}
	b.doubt = nil
	return true
}

func (b *Buffer) passApplied(p refundPass) {
	b.applied = p.pass
	for _, s := range p.shares {
		s.g.refunded += s.n
	}
}

// toRewrite marks the records of p's groups, which name a pass that was not applied, for writing again
// before a later pass is: once one is, they would read as applied.
func (b *Buffer) toRewrite(p refundPass) {
	if b.rewrite == nil {
		b.rewrite = map[*group]struct{}{}
	}
	for _, s := range p.shares {
		b.rewrite[s.g] = struct{}{}
	}
}

// recordPass writes the GroupRefund record of each group of p, and of each group to rewrite (with nothing
// pending), before p's refund; a failed write is logged and counted, and p is not given (false).
func (b *Buffer) recordPass(ctx context.Context, counter *admission.Counter, p refundPass) bool {
	if b.refundKV == nil {
		return true
	}
	put := func(g *group, n int) error {
		err := b.writeRecord(ctx, counter, g, proto.GroupRefund{Schema: proto.SchemaVersion, Refunded: g.refunded + n, Pending: n, Pass: p.pass})
		if err != nil {
			b.count(func(s *Stats) { s.RefundRecordErrors++ })
			b.deps.Log.Warn().Err(err).Str("group", g.id).Int("refunded", g.refunded).Int("pending", n).Msg("refund record not written; refund tried again later")
		}
		return err
	}
	in := make(map[*group]bool, len(p.shares))
	for _, s := range p.shares {
		in[s.g] = true
		if put(s.g, s.n) != nil {
			return false
		}
	}
	for g := range b.rewrite {
		if !in[g] {
			if put(g, 0) != nil {
				return false
			}
		}
	}
	b.rewrite = nil
	return true
}

// retryPause waits before a refund record is read or written again, or until ctx ends.
func retryPause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// recordWrites bounds writeRecord's attempts: a read of the record may lag (a replicated bucket answers
// from any replica), and its revision then conflicts again.
const recordWrites = 20

// writeRecord writes g's record by compare-and-set on the revision this buffer last wrote or read (created
// when it knows none), so that a buffer before this one, still running after this one started, cannot
// write over it. A conflict is a write this buffer does not know of: its own whose reply was lost, a
// record that expired, or one the buffer before wrote late. Unless the counter says another buffer started
// after this one (this one is then the buffer before: it stops, passMoved), the record is read and
// written again over whatever it holds. It is called with no pass in doubt (resolveDoubt first), so the
// counter holds the pass applied.
func (b *Buffer) writeRecord(ctx context.Context, counter *admission.Counter, g *group, r proto.GroupRefund) error {
	data, err := codec.Marshal(r, 0)
	if err != nil {
		return err
	}
	key := proto.RefundKey(g.id)
	for try := 1; ; try++ {
		var rev uint64
		if g.recordRev == 0 {
			rev, err = b.refundKV.Create(ctx, key, data)
		} else {
			rev, err = b.refundKV.Update(ctx, key, data, g.recordRev)
		}
		if err == nil {
			g.recordRev, g.record, g.recordAt = rev, r, time.Now()
			return nil
		}
		if !admission.IsConflict(err) || try == recordWrites {
			return err
		}
		if try > 1 {
			if err := retryPause(ctx); err != nil {
				return err
			}
		}
		// Ownership proven by a compare-and-set, not a read, which a lagging replica may answer.
		if err := counter.Fence(ctx, b.applied, b.owner); err != nil {
			var moved *admission.PassMovedError
			if errors.As(err, &moved) {
				b.passMoved = err
			}
			return err
		}
		// The write this buffer did not know of reads as g.record (its own lost write, or the buffer
		// before's late one of the same pass): if this write fails too, it is refreshed as g.record.
		e, err := b.refundKV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			g.recordRev = 0
		case err != nil:
			return err
		default:
			g.recordRev, g.recordAt = e.Revision(), time.Time{}
		}
		if try == 1 {
			b.count(func(s *Stats) { s.RefundRecordConflicts++ })
			b.deps.Log.Warn().Str("group", g.id).Uint64("revision", g.recordRev).Msg("refund record changed by a write this buffer did not know of; writing over it")
		}
	}
}

// queued is how many released batches the trainer has not applied yet, and whether that is MaxQueued or
// more. It is the smaller of two counts: the batches pending or unacked at the advantage-normalizer's and
// the trainer's consumers, which lags a new version until the trainer acks the batch it applied, and the
// batches this buffer released that no version has applied. That second count misses those a previous
// buffer released, so it is used only once a version has named one of this buffer's batches (by then the
// trainer has applied every older one); until then the consumers' count stands alone, and its lag can
// only hold a release back until the next look. When a consumer cannot be read (not created yet, or NATS
// busy), the second count stands alone once it is used; before that nothing is queued: the release is not
// held back (the trainer checks staleness again, so a count too small costs episodes, never the bound).
func (b *Buffer) queued(ctx context.Context, js jetstream.JetStream, log zerolog.Logger) (ahead int, full bool) {
	if b.cfg.MaxQueued < 0 {
		return b.pace.ahead(), false
	}
	n, err := b.queueDepth(ctx, js)
	switch {
	case b.pace.complete() && err != nil:
		// The pace's count is exact once complete: the consumers' depth only bounds it.
		log.Debug().Err(err).Msg("queue depth unknown; counting the batches released and not applied")
		n = b.pace.ahead()
	case b.pace.complete():
		n = min(n, b.pace.ahead())
	case err != nil:
		log.Debug().Err(err).Msg("queue depth unknown; releasing")
		return 0, false
	}
	return n, n >= b.cfg.MaxQueued
}

// queueDepth is how many batches wait or are in flight at the advantage-normalizer and the trainer, from
// their durable consumers.
func (b *Buffer) queueDepth(ctx context.Context, js jetstream.JetStream) (int, error) {
	n := 0
	for i, c := range []struct{ stream, name string }{{proto.StreamBatches, proto.ConsumerNormalizer}, {proto.StreamTrain, proto.ConsumerTrainer}} {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		if b.queueCons[i] == nil {
			cons, err := js.Consumer(qctx, c.stream, c.name)
			if err != nil {
				cancel()
				return 0, fmt.Errorf("consumer %s: %w", c.name, err)
			}
			b.queueCons[i] = cons
		}
		info, err := b.queueCons[i].Info(qctx)
		cancel()
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				b.queueCons[i] = nil
			}
			return 0, fmt.Errorf("consumer %s: %w", c.name, err)
		}
		n += int(info.NumPending) + info.NumAckPending
	}
	return n, nil
}

// split sorts a group's members into usable ones and, with TurnStaleness, stale ones that can go along
// for the baseline; it counts the masked and tallies the stale.
func (b *Buffer) split(g *group, v int64) (ok, base []proto.Episode, masked int, stale Tally) {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// A member its rollout stopped (rollout.Config.StopStale, proto.StatusStale) was stopped because no
	// batch could take it any more (the closed mark, or the trainer past its admission version by more than
	// Eta): it is stale whatever version this batch is composed for (this buffer's view of the version can
	// lag), and so is every member admitted no later.
	stoppedAt := int64(-1)
	for _, m := range g.members {
		if m.ep.Status == proto.StatusStale {
			stoppedAt = max(stoppedAt, m.ep.StartVersion)
		}
	}
	for _, id := range ids {
		ep := g.members[id].ep
		switch {
		case ep.InfraFailure:
			masked++
		case ep.Status == proto.StatusStale, !b.cfg.TurnStaleness && ep.StartVersion <= stoppedAt:
			stale.add(&ep)
		case b.cfg.TurnStaleness:
			if _, _, within := ep.TurnsWithin(v, b.cfg.Eta); within {
				ok = append(ok, ep)
			} else {
				stale.add(&ep)
				base = append(base, ep)
			}
		case v-ep.StartVersion > int64(b.cfg.Eta):
			stale.add(&ep)
		default:
			ok = append(ok, ep)
		}
	}
	stale.closeGroup()
	return ok, base, masked, stale
}

// trains is the staleness of an episode in a batch for version v and its turns that train.
func (b *Buffer) trains(ep *proto.Episode, v int64) (staleness int64, turns int) {
	if !b.cfg.TurnStaleness {
		return v - ep.StartVersion, len(ep.Turns)
	}
	from, since, _ := ep.TurnsWithin(v, b.cfg.Eta)
	return v - since, len(ep.Turns) - from
}

// publish stores one batch; its id is a hash of its episode ids, so a re-release after a crash is
// deduplicated. The first usable episodes train; the rest go along for their groups' baselines.
func (b *Buffer) publish(ctx context.Context, js jetstream.JetStream, eps []proto.Episode, usable int, v int64) error {
	h := sha256.New()
	maxStale := int64(0)
	turns := 0
	stale := make([]int64, 0, usable)
	for i := range eps {
		h.Write([]byte(eps[i].ID))
		h.Write([]byte{0})
		if i >= usable {
			continue
		}
		s, n := b.trains(&eps[i], v)
		turns += n
		maxStale = max(maxStale, s)
		stale = append(stale, s)
	}
	now := time.Now()
	batch := proto.Batch{Schema: proto.SchemaVersion, ID: "b-" + hex.EncodeToString(h.Sum(nil))[:24], Episodes: eps, TrainerVersion: v, ReleasedAt: now.UnixNano()}
	data, err := codec.Marshal(batch, proto.MaxBatchBytes)
	if err != nil {
		return err
	}
	if _, err := bus.PublishOnce(ctx, js, proto.SubjectBatches, batch.ID, data); err != nil {
		return fmt.Errorf("publish batch %s: %w", batch.ID, err)
	}
	for _, s := range stale {
		b.staleness.Observe(float64(s))
	}
	b.pace.released(batch.ID, now, turns)
	b.batches.Inc()
	b.count(func(s *Stats) {
		s.Batches++
		s.Batched += int64(usable)
		s.MaxStaleness = max(s.MaxStaleness, maxStale)
		s.PendingGroups = len(b.groups)
	})
	b.deps.Log.Debug().Str("batch", batch.ID).Int("episodes", len(eps)).Int64("version", v).Msg("batch released")
	return nil
}

func (b *Buffer) remember(groupID string) {
	b.released[groupID] = struct{}{}
	b.order = append(b.order, groupID)
	if len(b.order) > maxRemembered {
		delete(b.released, b.order[0])
		b.order = b.order[1:]
	}
}
