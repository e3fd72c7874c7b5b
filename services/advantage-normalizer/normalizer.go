// Package normalizer is the advantage-normalizer service: for each batch it computes GRPO group advantages,
// then task advantage normalization across the batch, and publishes the train batch under the batch's id.
package normalizer

import (
	"context"
	"errors"
	"fmt"
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

// Config of the advantage-normalizer.
type Config struct {
	ID string
	// AbnormalReward replaces the reward of episodes the agent ended abnormally.
	AbnormalReward float64
	// TaskNorm turns task advantage normalization on.
	TaskNorm bool
	// FlatGroupCoef weighs the task baseline of groups whose rewards are all equal (see
	// Options.FlatGroupCoef; 0: off).
	FlatGroupCoef float64
}

// DefaultFlatGroupCoef is Config.FlatGroupCoef's default: a flat group weighs half a baseline.
const DefaultFlatGroupCoef = 0.5

// MaxFlatGroupCoef bounds Config.FlatGroupCoef: a flat group should not outweigh the groups GRPO learns from.
const MaxFlatGroupCoef = 1.0

// DefaultConfig is the paper's setting, with flat groups learning from the task baseline.
func DefaultConfig() Config {
	return Config{AbnormalReward: DefaultAbnormalReward, TaskNorm: true, FlatGroupCoef: DefaultFlatGroupCoef}
}

// Validate explains what is wrong with a configuration.
func (c *Config) Validate() error {
	if c.AbnormalReward > 0 || c.AbnormalReward < -1 {
		return fmt.Errorf("advantage-normalizer: abnormal reward %v must be in [-1, 0]", c.AbnormalReward)
	}
	if !(c.FlatGroupCoef >= 0 && c.FlatGroupCoef <= MaxFlatGroupCoef) {
		return fmt.Errorf("advantage-normalizer: flat group coef %v must be in [0, %v]", c.FlatGroupCoef, MaxFlatGroupCoef)
	}
	return nil
}

// Deps are what the normalizer needs from its process.
type Deps struct {
	Conn    *nats.Conn
	Log     zerolog.Logger
	Metrics prometheus.Registerer
}

// Normalizer is the service.
type Normalizer struct {
	cfg     Config
	deps    Deps
	running atomic.Bool

	mu    sync.Mutex
	stats Stats

	batches *prometheus.CounterVec
}

// Stats are the normalizer's counters.
type Stats struct {
	Batches      int64 `json:"batches"`
	Episodes     int64 `json:"episodes"`
	DeadLettered int64 `json:"dead_lettered"`
	// Refunded counts the admissions given back for the episodes of dead-lettered batches (they will
	// never train); RefundErrors the refunds that failed (their room in the staleness gate stays taken).
	Refunded     int64 `json:"admissions_refunded"`
	RefundErrors int64 `json:"refund_errors"`
}

// New validates the configuration and builds the service.
func New(cfg Config, deps Deps) (*Normalizer, error) {
	if cfg.ID == "" {
		cfg.ID = service.NewID()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Conn == nil {
		return nil, errors.New("advantage-normalizer: Deps.Conn is required")
	}
	n := &Normalizer{cfg: cfg, deps: deps}
	n.batches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_normalizer_batches_total", Help: "Batches handled, by outcome."}, []string{"outcome"})
	if deps.Metrics != nil {
		if err := deps.Metrics.Register(n.batches); err != nil {
			return nil, fmt.Errorf("advantage-normalizer metrics: %w", err)
		}
	}
	return n, nil
}

// Running reports whether the service is consuming.
func (n *Normalizer) Running() bool { return n.running.Load() }

// Stats returns a copy of the counters.
func (n *Normalizer) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Run consumes batches until ctx ends; the batch in hand is finished first.
func (n *Normalizer) Run(ctx context.Context) error {
	log := n.deps.Log.With().Str("normalizer", n.cfg.ID).Logger()
	js, err := bus.JetStream(n.deps.Conn)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, proto.StreamBatches,
		bus.ConsumerConfig(proto.ConsumerNormalizer, proto.SubjectBatches, 64, 15*time.Second))
	if err != nil {
		return fmt.Errorf("advantage-normalizer consumer: %w", err)
	}
	counter, err := admission.Bind(ctx, js)
	if err != nil {
		return err
	}
	svc, err := service.Announce(n.deps.Conn, "advantage-normalizer", n.cfg.ID, func() any { return n.Stats() })
	if err != nil {
		return err
	}
	defer func() { _ = svc.Stop() }()
	n.running.Store(true)
	defer n.running.Store(false)
	log.Info().Bool("task_norm", n.cfg.TaskNorm).Float64("abnormal_reward", n.cfg.AbnormalReward).Float64("flat_group_coef", n.cfg.FlatGroupCoef).Msg("advantage-normalizer started")
	err = bus.ConsumeInOrder(ctx, cons, 16, log, func(m jetstream.Msg) error {
		n.handle(ctx, js, counter, m, log)
		return nil
	})
	log.Info().Interface("stats", n.Stats()).Msg("advantage-normalizer stopped")
	return err
}

func (n *Normalizer) handle(ctx context.Context, js jetstream.JetStream, counter *admission.Counter, m jetstream.Msg, log zerolog.Logger) {
	var b proto.Batch
	err := codec.Unmarshal(m.Data(), &b)
	if err != nil {
		b.Episodes = nil // what a failed decode filled in is not a count to give back
	}
	var tb *proto.TrainBatch
	if err == nil {
		tb, err = Advantages(&b, Options{AbnormalReward: n.cfg.AbnormalReward, TaskNorm: n.cfg.TaskNorm, FlatGroupCoef: n.cfg.FlatGroupCoef})
	}
	var data []byte
	if err == nil {
		// A train batch that cannot be encoded within the limit never will be: refused like a bad batch.
		data, err = codec.Marshal(tb, proto.MaxBatchBytes)
	}
	if err != nil {
		n.refuse(ctx, js, counter, m, &b, err, log)
		return
	}
	// Publish even if ctx is ending: the batch in hand is finished, then acked.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_, err = bus.PublishOnce(pctx, js, proto.SubjectTrain, tb.ID, data)
	cancel()
	if err != nil {
		log.Error().Err(err).Str("batch", b.ID).Msg("publish train batch; will be redelivered")
		_ = m.Nak()
		return
	}
	if err := m.Ack(); err != nil {
		log.Warn().Err(err).Str("batch", b.ID).Msg("ack batch (redelivery is deduplicated)")
	}
	n.batches.WithLabelValues("published").Inc()
	n.mu.Lock()
	n.stats.Batches++
	n.stats.Episodes += int64(len(tb.Episodes))
	n.mu.Unlock()
	log.Debug().Str("batch", b.ID).Int("episodes", len(tb.Episodes)).Msg("train batch published")
}

// refuse dead-letters a batch that cannot become a train batch, and gives the staleness gate back the
// admissions of its episodes: they left the replay-buffer as published, so nothing else will, and the
// room they hold would otherwise stay taken for good (enough refused batches would shut the gate). A batch
// that did not decode has no episodes to count; a redelivery of one already dead-lettered refunds nothing.
func (n *Normalizer) refuse(ctx context.Context, js jetstream.JetStream, counter *admission.Counter, m jetstream.Msg, b *proto.Batch, err error, log zerolog.Logger) {
	n.batches.WithLabelValues("refused").Inc()
	n.mu.Lock()
	n.stats.DeadLettered++
	n.mu.Unlock()
	log.Error().Err(err).Str("batch", b.ID).Int("episodes", len(b.Episodes)).Msg("batch refused; dead-lettered")
	refunded, err := admission.RefuseBatch(ctx, js, counter, "advantage-normalizer", m, err, len(b.Episodes), log.With().Str("batch", b.ID).Logger())
	n.mu.Lock()
	n.stats.Refunded += refunded
	if err != nil {
		n.stats.RefundErrors++
	}
	n.mu.Unlock()
}
