// Package mesh runs the five jetrl services in one process, each on its own NATS connection, so that they
// still talk only through NATS. `jetrl up` and the end-to-end tests use it.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	replaybuffer "github.com/jetrl/jetrl/services/replay-buffer"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Config of an in-process mesh.
type Config struct {
	NATSURL string
	// Dial holds extra options for every service's connection, such as an embedded server's InProcess.
	Dial  []nats.Option
	Tasks []string
	// TaskWeights gives each task its share of rollout groups (default 1 each).
	TaskWeights map[string]float64
	Seed        uint64
	GroupSize   int
	BatchSize   int
	// MaxBatchSize bounds the replay-buffer's variable batch (0: twice BatchSize).
	MaxBatchSize int
	// MaxQueued bounds the batches released and not yet applied (replaybuffer.Config.MaxQueued; 0: 2).
	MaxQueued int
	// Lead composes the next batch this long before the trainer's step should end (replaybuffer.Config.Lead).
	Lead time.Duration
	// Cut takes a group still playing at its last batch without its last members (replaybuffer.Config.Cut).
	Cut float64
	// TurnStaleness applies Eta to each turn in the replay-buffer and the trainer (their TurnStaleness).
	TurnStaleness bool
	// StopStale has the rollouts stop playing episodes no batch can take any more
	// (rollout.Config.StopStale); ignored with TurnStaleness.
	StopStale  bool
	Eta        int
	EnvHosts   int
	Rollouts   int
	StaleProb  float64
	Trainer    trainer.Config
	Normalizer normalizer.Config
	Rollout    rollout.Config // template for every replica; Tasks, sizes, Eta and Seed are set from above
	Env        env.Config     // template for every host
	Families   task.Registry  // default: the built-in families
	Log        zerolog.Logger
	// Metrics, if set, receives every service's metrics, labelled with the service replica.
	Metrics prometheus.Registerer
}

// registerer gives one service replica its labelled view of the metrics registry (nil: no metrics).
func (c Config) registerer(replica string) prometheus.Registerer {
	if c.Metrics == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"replica": replica}, c.Metrics)
}

// Mesh is a running set of services.
type Mesh struct {
	cfg Config

	Trainer    *trainer.Trainer
	Normalizer *normalizer.Normalizer
	Buffer     *replaybuffer.Buffer
	Hosts      []*env.Host
	Rollouts   []*rollout.Rollout

	mu        sync.Mutex
	conns     []*nats.Conn
	hostConns []*nats.Conn
	hostStops []context.CancelFunc
	// rollouts counts replicas started, for metric labels.
	rollouts int
	stops    []context.CancelFunc
	rollCtx  context.Context
	rollStop context.CancelFunc
	wg       sync.WaitGroup
	rollWG   sync.WaitGroup
	errs     []error
}

// Start connects and starts the env hosts, trainer, normalizer and replay-buffer; rollouts start with
// StartRollouts, so a caller can evaluate the initial policy first.
func Start(ctx context.Context, cfg Config) (*Mesh, error) {
	if cfg.EnvHosts == 0 {
		cfg.EnvHosts = 1
	}
	if cfg.Rollouts == 0 {
		cfg.Rollouts = 1
	}
	if cfg.Families == nil {
		cfg.Families = builtin.Registry()
	}
	for _, t := range cfg.Tasks {
		if _, err := cfg.Families.Get(t); err != nil {
			return nil, err
		}
	}
	m := &Mesh{cfg: cfg}
	ok := false
	defer func() {
		if !ok {
			m.Stop()
		}
	}()
	nc, err := m.connect(ctx, "setup")
	if err != nil {
		return nil, err
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		return nil, err
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.EnvHosts; i++ {
		c, err := m.connect(ctx, fmt.Sprintf("env-%d", i))
		if err != nil {
			return nil, err
		}
		ec := cfg.Env
		h, err := env.New(ec, env.Deps{Conn: c, Families: cfg.Families, Log: cfg.Log.With().Str("service", "env").Logger(), Metrics: cfg.registerer(fmt.Sprintf("env-%d", i))})
		if err != nil {
			return nil, err
		}
		m.Hosts = append(m.Hosts, h)
		m.hostConns = append(m.hostConns, c)
		stop, _ := m.run("env", h.Run, false)
		m.hostStops = append(m.hostStops, stop)
	}
	tcfg := cfg.Trainer
	tcfg.Eta, tcfg.TurnStaleness = cfg.Eta, cfg.TurnStaleness
	if m.Trainer, err = m.newTrainer(ctx, tcfg); err != nil {
		return nil, err
	}
	m.run("trainer", m.Trainer.Run, false)
	c, err := m.connect(ctx, "advantage-normalizer")
	if err != nil {
		return nil, err
	}
	if m.Normalizer, err = normalizer.New(cfg.Normalizer, normalizer.Deps{Conn: c, Log: cfg.Log.With().Str("service", "advantage-normalizer").Logger(), Metrics: cfg.registerer("advantage-normalizer")}); err != nil {
		return nil, err
	}
	m.run("advantage-normalizer", m.Normalizer.Run, false)
	if c, err = m.connect(ctx, "replay-buffer", bus.Unbuffered()); err != nil {
		return nil, err
	}
	if m.Buffer, err = replaybuffer.New(replaybuffer.Config{BatchSize: cfg.BatchSize, MaxBatchSize: cfg.MaxBatchSize, Eta: cfg.Eta, MaxQueued: cfg.MaxQueued, Lead: cfg.Lead, Cut: cfg.Cut, TurnStaleness: cfg.TurnStaleness},
		replaybuffer.Deps{Conn: c, Log: cfg.Log.With().Str("service", "replay-buffer").Logger(), Metrics: cfg.registerer("replay-buffer")}); err != nil {
		return nil, err
	}
	m.run("replay-buffer", m.Buffer.Run, false)
	ok = true
	return m, nil
}

func (m *Mesh) newTrainer(ctx context.Context, cfg trainer.Config) (*trainer.Trainer, error) {
	c, err := m.connect(ctx, "trainer")
	if err != nil {
		return nil, err
	}
	return trainer.New(cfg, trainer.Deps{Conn: c, Log: m.cfg.Log.With().Str("service", "trainer").Logger(), Metrics: m.cfg.registerer("trainer")})
}

// StartRollouts starts the rollout replicas.
func (m *Mesh) StartRollouts(ctx context.Context) error {
	for i := 0; i < m.cfg.Rollouts; i++ {
		c, err := m.connect(ctx, fmt.Sprintf("rollout-%d", i))
		if err != nil {
			return err
		}
		rc := m.cfg.Rollout
		if rc.ID != "" {
			// A template's id names every replica it starts, each with its number: an id that does not change
			// from run to run keeps the replica's groups (the instances they play) those of its seed, on a
			// fresh mesh. The admissions started before a replica's run salt them, so only the first replica
			// of several is sure to start at none (the next may start after it has claimed).
			rc.ID = fmt.Sprintf("%s-%d", rc.ID, m.rollouts+1)
		}
		rc.Tasks, rc.TaskWeights, rc.GroupSize, rc.BatchSize, rc.Eta = m.cfg.Tasks, m.cfg.TaskWeights, m.cfg.GroupSize, m.cfg.BatchSize, m.cfg.Eta
		rc.Seed, rc.StaleProb = m.cfg.Seed+uint64(i)*7919, m.cfg.StaleProb
		rc.StopStale = m.cfg.StopStale && !m.cfg.TurnStaleness
		m.rollouts++
		r, err := rollout.New(rc, rollout.Deps{Conn: c, Log: m.cfg.Log.With().Str("service", "rollout").Logger(), Metrics: m.cfg.registerer(fmt.Sprintf("rollout-%d", m.rollouts))})
		if err != nil {
			return err
		}
		m.Rollouts = append(m.Rollouts, r)
		m.run("rollout", r.Run, true)
	}
	return nil
}

// StopRollouts stops the rollout replicas and waits for them to drain.
func (m *Mesh) StopRollouts() {
	m.mu.Lock()
	stop := m.rollStop
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
	m.rollWG.Wait()
	m.mu.Lock()
	m.rollStop, m.rollCtx = nil, nil
	m.mu.Unlock()
}

// KillEnvHost cuts env host i off NATS at once, without draining, as a crash would look to the mesh.
func (m *Mesh) KillEnvHost(i int) {
	m.hostConns[i].Close()
	m.hostStops[i]()
}

// Err returns the errors services stopped with.
func (m *Mesh) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return errors.Join(m.errs...)
}

// Stop stops every service, waits for them, and closes their connections.
func (m *Mesh) Stop() {
	m.StopRollouts()
	m.mu.Lock()
	stops := m.stops
	m.stops = nil
	m.mu.Unlock()
	for _, s := range stops {
		s()
	}
	m.wg.Wait()
	m.mu.Lock()
	conns := m.conns
	m.conns = nil
	m.mu.Unlock()
	for _, c := range conns {
		_ = c.Drain()
	}
	// Drain is asynchronous; wait so that a server shut down next does not cut the drains short.
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range conns {
		for !c.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (m *Mesh) connect(ctx context.Context, name string, opts ...nats.Option) (*nats.Conn, error) {
	c, err := bus.Connect(ctx, m.cfg.NATSURL, "jetrl-"+name, m.cfg.Log.With().Str("conn", name).Logger(), append(append([]nats.Option{}, m.cfg.Dial...), opts...)...)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.conns = append(m.conns, c)
	m.mu.Unlock()
	return c, nil
}

// run owns one service goroutine; its context ends with Stop (or StopRollouts for rollouts), or with the
// returned cancel func; the returned channel closes when the service has returned.
func (m *Mesh) run(name string, fn func(context.Context) error, isRollout bool) (context.CancelFunc, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	wg := &m.wg
	var ctx context.Context
	cancel := context.CancelFunc(func() {})
	done := make(chan struct{})
	if isRollout {
		if m.rollStop == nil {
			var cancel context.CancelFunc
			m.rollCtx, cancel = context.WithCancel(context.Background())
			m.rollStop = cancel
		}
		ctx, wg = m.rollCtx, &m.rollWG
	} else {
		ctx, cancel = context.WithCancel(context.Background())
		m.stops = append(m.stops, cancel)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		err := fn(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped before it was told to")
		}
		if err != nil {
			m.cfg.Log.Error().Err(err).Str("service", name).Msg("service stopped with error")
			m.mu.Lock()
			m.errs = append(m.errs, fmt.Errorf("%s: %w", name, err))
			m.mu.Unlock()
		}
	}()
	return cancel, done
}

// WaitVersion waits until the trainer has published at least version v.
func (m *Mesh) WaitVersion(ctx context.Context, v int64) error {
	for {
		if m.Trainer.Running() && m.Trainer.Stats().Version >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
