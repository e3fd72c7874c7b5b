// Package config holds the settings every service process shares, read from flags and JETRL_* environment
// variables (kong tags), takes the rest from the run config recorded in KV (Main), and runs a service
// process around them.
package config

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Common are the settings of every service process.
type Common struct {
	NATS        string `name:"nats" env:"JETRL_NATS_URL" default:"nats://127.0.0.1:4222" help:"NATS server URL(s), comma separated."`
	LogLevel    string `name:"log-level" env:"JETRL_LOG_LEVEL" default:"info" help:"debug, info, warn, error or disabled."`
	LogPretty   bool   `name:"log-pretty" env:"JETRL_LOG_PRETTY" help:"Human-readable logs instead of JSON lines."`
	MetricsAddr string `name:"metrics-addr" env:"JETRL_METRICS_ADDR" default:":9090" help:"Address of the Prometheus /metrics endpoint (empty: off)."`
	Replicas    int    `name:"stream-replicas" env:"JETRL_STREAM_REPLICAS" default:"1" help:"Replicas of streams and buckets (3 on a 3-node cluster)."`
	RunConfig   bool   `name:"run-config" env:"JETRL_RUN_CONFIG" default:"true" negatable:"" help:"Take every setting not given by flag or environment variable from the run config in KV (jetrl_run, written by jetrl up or jetrl config set)."`
	// Unbuffered connects with bus.Unbuffered; set by the service's main, not a flag.
	Unbuffered bool `kong:"-"`
}

// Validate explains what is wrong with the settings.
func (c *Common) Validate() error {
	var errs []error
	if c.NATS == "" {
		errs = append(errs, errors.New("--nats / JETRL_NATS_URL is empty"))
	}
	for _, u := range strings.Split(c.NATS, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err != nil || p.Host == "" {
			errs = append(errs, fmt.Errorf("--nats: %q is not a URL like nats://host:4222", u))
		}
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Errorf("--stream-replicas %d: want 1, 3 or 5", c.Replicas))
	}
	return errors.Join(errs...)
}

// Process is what a service's main hands to its service: connection, logger and metrics registry.
type Process struct {
	Conn    *nats.Conn
	Log     zerolog.Logger
	Metrics prometheus.Registerer
}

// Run is a whole service process: it validates the settings, connects, makes sure the mesh's streams and
// buckets exist, serves /metrics, runs the service until SIGINT/SIGTERM, and drains the connection,
// returning once it is closed. It does not read the run config; Main does.
func Run(name string, c Common, run func(ctx context.Context, p Process) error) error {
	return serve(name, c, nil, run)
}

// serve is Run with a step, configure, that runs once the topology exists and before the service starts
// (Main takes the run config there); nil skips it.
func serve(name string, c Common, configure func(ctx context.Context, js jetstream.JetStream, log zerolog.Logger) error,
	run func(ctx context.Context, p Process) error) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log, err := logging.New(name, c.LogLevel, c.LogPretty, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	closed := make(chan struct{})
	opts := []nats.Option{notifyClosed(closed)}
	if c.Unbuffered {
		opts = append(opts, bus.Unbuffered())
	}
	nc, err := bus.Connect(ctx, c.NATS, "jetrl-"+name, log, opts...)
	if err != nil {
		return err
	}
	defer drain(nc, closed, log)
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	attempts := 0
	err = retryEach(ctx, topologyAttempt, topologyDeadline, func(actx context.Context) error {
		err := bus.EnsureTopology(actx, js, c.Replicas)
		if err != nil {
			attempts++
			log.Warn().Err(err).Int("attempt", attempts).Msg("topology not ready; retrying")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	if configure != nil {
		if err := configure(ctx, js, log); err != nil {
			return err
		}
	}
	reg := metrics.NewRegistry()
	addr, served, err := metrics.Serve(ctx, c.MetricsAddr, reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	log.Info().Str("nats", nc.ConnectedUrlRedacted()).Str("metrics", addr).Msg("started")
	err = run(ctx, Process{Conn: nc, Log: log, Metrics: reg})
	stop()
	if serr := <-served; serr != nil && err == nil {
		err = serr
	}
	return err
}

// notifyClosed is the connect option that closes closed once the connection is closed, after calling the
// closed handler the earlier options set, if any.
func notifyClosed(closed chan struct{}) nats.Option {
	return func(o *nats.Options) error {
		prev := o.ClosedCB
		once := sync.OnceFunc(func() { close(closed) })
		o.ClosedCB = func(nc *nats.Conn) {
			if prev != nil {
				prev(nc)
			}
			once()
		}
		return nil
	}
}

// drain drains the connection and waits until it is closed, so that what the service published last
// (final acks, replies) reaches the server before the process exits. Drain itself only starts draining;
// closed is the channel notifyClosed closes. The wait is bounded by the connection's drain timeout, after
// which the client closes the connection itself, and a little more.
func drain(nc *nats.Conn, closed <-chan struct{}, log zerolog.Logger) {
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		log.Warn().Err(err).Msg("drain")
	}
	wait := nc.Opts.DrainTimeout + drainGrace
	select {
	case <-closed:
	case <-time.After(wait):
		log.Warn().Dur("waited", wait).Msg("connection not closed after draining; exiting anyway")
	}
}

// drainGrace is how long drain waits beyond the drain timeout for the connection to close.
const drainGrace = 2 * time.Second

// A fresh JetStream cluster may take minutes to create replicated streams while it elects leaders, and it
// may drop a request on a leader change without an answer: each attempt is bounded by topologyAttempt, and
// attempts go on until topologyDeadline.
const (
	topologyAttempt  = 15 * time.Second
	topologyDeadline = 4 * time.Minute
)

// retryEach calls fn, each call with its own deadline of attempt, until it succeeds or total has passed
// (or ctx ends); it returns fn's last error.
func retryEach(ctx context.Context, attempt, total time.Duration, fn func(context.Context) error) error {
	tctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(tctx, attempt)
		err := fn(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-tctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ServiceID is the id of a process given id (by flag or environment): that id, else ContainerID's, else ""
// (the service draws a random one); from says which, for the log.
func ServiceID(given string) (id, from string) {
	if given != "" {
		return given, "given"
	}
	if id = ContainerID(os.Getpid(), os.Hostname); id != "" {
		return id, "container hostname"
	}
	return "", "random"
}

// ContainerID is the id a service process takes when none is given: its hostname when it is the first
// process of its container (pid 1), where the hostname is the container's own and outlives a restart of the
// process (docker's restart policy, a pod's container restart), so the mesh sees the process come back
// under the same id (a rollout replica's lost groups are released after the replica timeout, not the group
// timeout; a replay-buffer keeps its id in the status). Elsewhere, where several processes may share
// a host name, it is "" (random).
func ContainerID(pid int, hostname func() (string, error)) string {
	if pid != 1 {
		return ""
	}
	h, err := hostname()
	if err != nil || h == "" || h == "localhost" {
		return ""
	}
	return h
}
