// Package env is the env service: a host that serves task sessions behind the function-call API
// (start, step, cancel) as a NATS micro service. Many hosts run at once; a start goes to one of them
// through a queue group, and every later call of the session goes to the host named in its session id.
package env

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultCapacity    = 4096
	DefaultIdleTimeout = 5 * time.Minute
	DefaultCallTimeout = 4 * time.Minute
)

// Config of one env host.
type Config struct {
	// HostID names the host in session ids and subjects; default: a random id.
	HostID string
	// Capacity is the most sessions the host holds at once; a start beyond it is refused with ErrHostFull.
	Capacity int
	// IdleTimeout expires a session that received no call for this long.
	IdleTimeout time.Duration
	// CallTimeout bounds one step; a slower step fails the session with ErrEnvTimeout.
	CallTimeout time.Duration
	// StepLatency, if set, is added to every step (to emulate slow environments in benchmarks; see
	// Lognormal and LatencyConfig). The wait holds up only its own session and ends when the host stops.
	StepLatency func() time.Duration
}

func (c *Config) setDefaults() {
	if c.HostID == "" {
		c.HostID = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
}

// Validate explains what is wrong with a configuration.
func (c *Config) Validate() error {
	var errs []error
	if strings.ContainsAny(c.HostID, ". *>\t") {
		errs = append(errs, fmt.Errorf("env host id %q: must not contain dots, spaces or wildcards", c.HostID))
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("env capacity %d: must be at least 1", c.Capacity))
	}
	if c.IdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("env idle timeout %v: must be at least 1s", c.IdleTimeout))
	}
	if c.CallTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("env call timeout %v: must be at least 1ms", c.CallTimeout))
	}
	return errors.Join(errs...)
}

// Deps are what a host needs from its process.
type Deps struct {
	Conn     *nats.Conn
	Families task.Registry
	Log      zerolog.Logger
	Metrics  prometheus.Registerer
}

// Host serves sessions until its context ends.
type Host struct {
	cfg  Config
	deps Deps

	mu       sync.Mutex
	sessions map[string]*session
	nextID   atomic.Uint64
	inflight sync.WaitGroup
	running  atomic.Bool
	gate     sync.RWMutex  // orders the running check and inflight.Add against shutdown
	stopping chan struct{} // closed when Run's context ends: cuts step latency waits short

	started, stepped, expired, refused *prometheus.CounterVec
	errorsTotal                        *prometheus.CounterVec
	active                             prometheus.Gauge
	stepSeconds                        prometheus.Histogram
	unanswered                         atomic.Int64
}

type session struct {
	// run is held while the game runs a step, which may go on past its timeout, or while it is closed.
	run          sync.Mutex
	pendingClose atomic.Bool
	mu           sync.Mutex
	id           string
	task         string
	sess         *task.Session
	lastCall     time.Time
	broken       error
}

// New validates the configuration and builds a host.
func New(cfg Config, deps Deps) (*Host, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Conn == nil || len(deps.Families) == 0 {
		return nil, errors.New("env: Deps.Conn and Deps.Families are required")
	}
	h := &Host{cfg: cfg, deps: deps, sessions: map[string]*session{}, stopping: make(chan struct{})}
	h.started = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_env_sessions_started_total", Help: "Sessions started, by task."}, []string{"task"})
	h.stepped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_env_steps_total", Help: "Steps applied, by task and resulting status."}, []string{"task", "status"})
	h.expired = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_env_sessions_expired_total", Help: "Sessions expired while idle, by task."}, []string{"task"})
	h.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_env_starts_refused_total", Help: "Starts refused, by reason."}, []string{"reason"})
	h.errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetrl_env_request_errors_total", Help: "Requests answered with an error, by endpoint and code."}, []string{"endpoint", "code"})
	h.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetrl_env_sessions_active", Help: "Sessions held now."})
	h.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "jetrl_env_step_seconds", Help: "Time to apply one step.", Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10)})
	unanswered := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jetrl_env_starts_unanswered_total", Help: "Sessions closed as soon as opened because their start reply could not be sent (too large, or refused by the connection)."},
		func() float64 { return float64(h.unanswered.Load()) })
	if deps.Metrics != nil {
		for _, c := range []prometheus.Collector{h.started, h.stepped, h.expired, h.refused, h.errorsTotal, h.active, h.stepSeconds, unanswered, newCacheCollector(deps.Families)} {
			if err := deps.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("env metrics: %w", err)
			}
		}
	}
	return h, nil
}

// ID of the host.
func (h *Host) ID() string { return h.cfg.HostID }

// Running reports whether the host is serving.
func (h *Host) Running() bool { return h.running.Load() }

// Unanswered is the number of sessions closed because their start reply could not be sent.
func (h *Host) Unanswered() int64 { return h.unanswered.Load() }

// Active is the number of sessions held.
func (h *Host) Active() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Run serves until ctx ends, then stops taking requests and waits for calls in flight.
func (h *Host) Run(ctx context.Context) error {
	svc, err := micro.AddService(h.deps.Conn, micro.Config{
		Name:        proto.EnvService,
		Version:     "1.0.0",
		Description: "jetrl environment host: task sessions behind the function-call API",
		Metadata:    map[string]string{"host_id": h.cfg.HostID, "capacity": fmt.Sprint(h.cfg.Capacity), "tasks": strings.Join(h.deps.Families.Names(), ",")},
	})
	if err != nil {
		return fmt.Errorf("env: add micro service: %w", err)
	}
	add := func(name, subject string, fn func(request), opts ...micro.EndpointOpt) error {
		opts = append(opts, micro.WithEndpointSubject(subject))
		return svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { h.async(fn, r) }), opts...)
	}
	err = errors.Join(
		add("start", proto.SubjectEnvStart, h.handleStart, micro.WithEndpointQueueGroup(proto.EnvQueueGroup)),
		add("step", proto.SubjectEnvStep(h.cfg.HostID), h.handleStep),
		add("cancel", proto.SubjectEnvCancel(h.cfg.HostID), h.handleCancel),
		add("starts", proto.SubjectEnvStartBatch, h.handleStartBatch, micro.WithEndpointQueueGroup(proto.EnvQueueGroup)),
		add("steps", proto.SubjectEnvStepBatch(h.cfg.HostID), h.handleStepBatch),
	)
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("env: add endpoints: %w", err)
	}
	if err := h.deps.Conn.Flush(); err != nil { // the server holds our subscriptions before we say we serve
		_ = svc.Stop()
		return fmt.Errorf("env: flush subscriptions: %w", err)
	}
	h.running.Store(true)
	h.deps.Log.Info().Str("host", h.cfg.HostID).Int("capacity", h.cfg.Capacity).Strs("tasks", h.deps.Families.Names()).Msg("env host serving")

	ticker := time.NewTicker(h.cfg.IdleTimeout / 10)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			h.gate.Lock() // no handler is between its running check and inflight.Add
			h.running.Store(false)
			h.gate.Unlock()
			close(h.stopping)
			err := svc.Stop()
			_ = h.deps.Conn.Flush() // the server has dropped our subscriptions once this returns
			h.inflight.Wait()
			n := h.closeAll()
			h.deps.Log.Info().Str("host", h.cfg.HostID).Int("sessions_dropped", n).Msg("env host stopped")
			return err
		case now := <-ticker.C:
			h.expire(now)
		}
	}
}

// request is what a handler needs of a micro request. Handlers run on their own goroutines after micro's
// handler has returned, and micro reads its request object then, so they answer through the connection
// instead of through it.
type request struct {
	data  []byte
	reply string
}

// async runs a handler on its own goroutine so that one slow session never holds up the others;
// the host owns these goroutines through inflight and waits for them on shutdown.
func (h *Host) async(fn func(request), r micro.Request) {
	req := request{data: r.Data(), reply: r.Reply()}
	h.gate.RLock()
	defer h.gate.RUnlock()
	if !h.running.Load() {
		h.fail(req, "request", proto.ErrShuttingDown, "")
		return
	}
	h.inflight.Add(1)
	go func() {
		defer h.inflight.Done()
		fn(req)
	}()
}

// closeAll ends every session (at shutdown) and returns how many there were.
func (h *Host) closeAll() int {
	h.mu.Lock()
	all := h.sessions
	h.sessions = map[string]*session{}
	h.mu.Unlock()
	for _, s := range all {
		s.close(h.deps.Log)
		h.active.Dec()
	}
	return len(all)
}

func (h *Host) expire(now time.Time) {
	h.mu.Lock()
	var gone []*session
	for id, s := range h.sessions {
		if s.mu.TryLock() {
			if now.Sub(s.lastCall) > h.cfg.IdleTimeout {
				gone = append(gone, s)
				delete(h.sessions, id)
			}
			s.mu.Unlock()
		}
	}
	h.mu.Unlock()
	for _, s := range gone {
		s.close(h.deps.Log)
		h.expired.WithLabelValues(s.task).Inc()
		h.active.Dec()
		h.deps.Log.Info().Str("session", s.id).Str("task", s.task).Msg("session expired")
	}
}

func (h *Host) fail(r request, endpoint string, err error, detail string) {
	code := proto.ErrorCodes[err]
	if code == "" {
		code = "500"
	}
	desc := err.Error()
	if detail != "" {
		desc += ": " + detail
	}
	h.errorsTotal.WithLabelValues(endpoint, code).Inc()
	msg := nats.NewMsg(r.reply)
	msg.Header.Set(micro.ErrorHeader, desc)
	msg.Header.Set(micro.ErrorCodeHeader, code)
	if rerr := h.deps.Conn.PublishMsg(msg); rerr != nil {
		h.deps.Log.Warn().Err(rerr).Str("endpoint", endpoint).Msg("reply failed")
	}
}

// failWrapped answers with the catalogued error that err wraps, keeping err's full text.
func (h *Host) failWrapped(r request, endpoint string, err error) {
	for known := range proto.ErrorCodes {
		if errors.Is(err, known) {
			h.fail(r, endpoint, known, strings.TrimPrefix(strings.TrimPrefix(err.Error(), known.Error()), ": "))
			return
		}
	}
	h.fail(r, endpoint, proto.ErrInternal, err.Error())
}

// respond answers r with v and reports whether the answer went out; one too large for a reply is
// answered with the error instead.
func (h *Host) respond(r request, endpoint string, v any) bool {
	b, err := codec.Marshal(v, proto.MaxEnvMessageBytes)
	if err != nil {
		h.failWrapped(r, endpoint, err)
		return false
	}
	if err := h.deps.Conn.Publish(r.reply, b); err != nil {
		h.deps.Log.Warn().Err(err).Str("endpoint", endpoint).Msg("reply failed")
		return false
	}
	return true
}

// dropUnanswered closes a session whose start reply did not go out: its caller cannot know of it, so it
// would hold a slot until it idled out.
func (h *Host) dropUnanswered(id string) {
	s, err := h.lookup(id)
	if err != nil {
		return
	}
	h.unanswered.Add(1)
	s.mu.Lock()
	h.drop(s)
	s.mu.Unlock()
	h.deps.Log.Warn().Str("session", id).Msg("start reply not sent; session closed")
}

func (h *Host) handleStart(r request) {
	var req proto.EnvStartRequest
	if err := codec.Unmarshal(r.data, &req); err != nil {
		h.failWrapped(r, "start", err)
		return
	}
	rep, err := h.start(req)
	if err != nil {
		h.failWrapped(r, "start", err)
		return
	}
	if !h.respond(r, "start", rep) {
		h.dropUnanswered(rep.SessionID)
	}
}

// start opens one session; its errors wrap the catalogued error a client acts on.
func (h *Host) start(req proto.EnvStartRequest) (*proto.EnvStartReply, error) {
	fam, err := h.deps.Families.Get(req.Task)
	if err != nil {
		h.refused.WithLabelValues("unknown-task").Inc()
		return nil, err
	}
	h.mu.Lock()
	full := len(h.sessions) >= h.cfg.Capacity
	h.mu.Unlock()
	if full {
		h.refused.WithLabelValues("capacity").Inc()
		return nil, fmt.Errorf("%w: host %s holds %d sessions", proto.ErrHostFull, h.cfg.HostID, h.cfg.Capacity)
	}
	sess, open, err := newSession(fam, req)
	if errors.Is(err, proto.ErrInternal) {
		h.refused.WithLabelValues("internal").Inc()
		return nil, err
	}
	if err != nil {
		h.refused.WithLabelValues("bad-request").Inc()
		return nil, err
	}
	s := &session{
		id:       h.cfg.HostID + "-" + strconv.FormatUint(h.nextID.Add(1), 10),
		task:     req.Task,
		sess:     sess,
		lastCall: time.Now(),
	}
	h.mu.Lock()
	if len(h.sessions) >= h.cfg.Capacity {
		h.mu.Unlock()
		h.refused.WithLabelValues("capacity").Inc()
		_ = sess.Close()
		return nil, fmt.Errorf("%w: host %s holds %d sessions", proto.ErrHostFull, h.cfg.HostID, h.cfg.Capacity)
	}
	h.sessions[s.id] = s
	h.mu.Unlock()
	h.active.Inc()
	h.started.WithLabelValues(req.Task).Inc()
	return &proto.EnvStartReply{
		Schema:    proto.SchemaVersion,
		SessionID: s.id,
		HostID:    h.cfg.HostID,
		Messages: []proto.Message{
			{Role: "system", Content: "You are an agent acting in an environment through tool calls. " + open.Instruction},
			{Role: "user", Content: open.Observation},
		},
		Instruction: open.Instruction,
		Observation: open.Observation,
		Tools:       fam.Tools(),
		Admissible:  open.Admissible,
		MaxTurns:    fam.MaxTurns(),
	}, nil
}

func (h *Host) lookup(id string) (*session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q on host %s", proto.ErrUnknownSession, id, h.cfg.HostID)
	}
	return s, nil
}

// drop removes a session and releases its instance; the caller holds s.mu or owns s alone.
func (h *Host) drop(s *session) {
	h.mu.Lock()
	_, ok := h.sessions[s.id]
	delete(h.sessions, s.id)
	h.mu.Unlock()
	if ok {
		h.active.Dec()
		s.close(h.deps.Log)
	}
}

// close releases the instance now, or, if a step is still running (it timed out), when that step returns.
func (s *session) close(log zerolog.Logger) {
	s.pendingClose.Store(true)
	s.closeIfIdle(log)
}

func (s *session) closeIfIdle(log zerolog.Logger) {
	if !s.pendingClose.Load() || !s.run.TryLock() {
		return
	}
	defer s.run.Unlock()
	if err := s.sess.Close(); err != nil {
		log.Warn().Err(err).Str("session", s.id).Msg("close session")
	}
}

// step applies call under the run lock, which it releases even if the game panics, and then releases the
// instance if a close came while the step ran past its timeout.
func (s *session) step(call proto.ToolCall, log zerolog.Logger) (task.Result, error) {
	defer s.closeIfIdle(log)
	s.run.Lock()
	defer s.run.Unlock()
	return s.sess.Step(call)
}

func (h *Host) handleStep(r request) {
	var req proto.EnvStepRequest
	if err := codec.Unmarshal(r.data, &req); err != nil {
		h.failWrapped(r, "step", err)
		return
	}
	rep, err := h.stepSession(req)
	if err != nil {
		h.failWrapped(r, "step", err)
		return
	}
	h.respond(r, "step", rep)
}

// stepSession applies one call to its session; its errors wrap the catalogued error a client acts on.
func (h *Host) stepSession(req proto.EnvStepRequest) (*proto.EnvStepReply, error) {
	s, err := h.lookup(req.SessionID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastCall = time.Now()
	if s.broken != nil {
		return nil, s.broken
	}
	start := time.Now()
	res, err := h.step(s, req.Call)
	h.stepSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		if errors.Is(err, proto.ErrEnvTimeout) || errors.Is(err, proto.ErrInternal) {
			s.broken = err
		}
		return nil, err
	}
	h.stepped.WithLabelValues(s.task, res.Status).Inc()
	if res.Done {
		h.drop(s)
	}
	return &proto.EnvStepReply{
		Schema:      proto.SchemaVersion,
		Observation: res.Observation,
		Admissible:  res.Admissible,
		Done:        res.Done,
		Reward:      res.Reward,
		Status:      res.Status,
		Turn:        s.sess.Turn(),
		Metrics:     res.Metrics,
	}, nil
}

// newSession generates and starts the instance req names. A task that panics doing so fails the start with
// ErrInternal instead of ending the host and every session on it.
func newSession(fam task.Family, req proto.EnvStartRequest) (sess *task.Session, open task.Opening, err error) {
	defer func() {
		if p := recover(); p != nil {
			sess, err = nil, fmt.Errorf("%w: task %s panicked starting %s seed %d: %v", proto.ErrInternal, req.Task, req.Split, req.Seed, p)
		}
	}()
	return task.NewSession(fam, req.Split, req.Seed)
}

// step applies one call within CallTimeout and checks what the game returned.
func (h *Host) step(s *session, call proto.ToolCall) (res task.Result, err error) {
	type outcome struct {
		res task.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("%w: task %s panicked: %v", proto.ErrInternal, s.task, p)}
			}
		}()
		if h.cfg.StepLatency != nil {
			if err := h.wait(h.cfg.StepLatency()); err != nil {
				done <- outcome{err: err}
				return
			}
		}
		r, err := s.step(call, h.deps.Log)
		done <- outcome{r, err}
	}()
	timer := time.NewTimer(h.cfg.CallTimeout)
	defer timer.Stop()
	select {
	case o := <-done:
		if o.err == nil && (math.IsNaN(o.res.Reward) || math.IsInf(o.res.Reward, 0)) {
			return o.res, fmt.Errorf("%w: task %s returned reward %v", proto.ErrInternal, s.task, o.res.Reward)
		}
		return o.res, o.err
	case <-timer.C:
		return task.Result{}, fmt.Errorf("%w: step of session %s took longer than %v", proto.ErrEnvTimeout, s.id, h.cfg.CallTimeout)
	}
}

// wait sleeps d, or less if the host stops meanwhile (then it returns ErrShuttingDown).
func (h *Host) wait(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-h.stopping:
		return fmt.Errorf("%w: step latency wait cut short", proto.ErrShuttingDown)
	}
}

func (h *Host) handleCancel(r request) {
	var req proto.EnvCancelRequest
	if err := codec.Unmarshal(r.data, &req); err != nil {
		h.failWrapped(r, "cancel", err)
		return
	}
	s, err := h.lookup(req.SessionID)
	if err != nil {
		h.failWrapped(r, "cancel", err)
		return
	}
	s.mu.Lock()
	h.drop(s)
	s.mu.Unlock()
	h.respond(r, "cancel", proto.EnvCancelReply{Schema: proto.SchemaVersion})
}
