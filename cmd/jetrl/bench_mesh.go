package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/benchtask"
	"github.com/jetrl/jetrl/cmd/jetrl/mesh"
	"github.com/jetrl/jetrl/proto"
	normalizer "github.com/jetrl/jetrl/services/advantage-normalizer"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/codec"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// benchMeshCmd measures the data plane: the five services on an embedded server with the zero-latency task
// family (benchtask.Zero) and the smallest built-in policy, then, in the same run and on the same server, a
// raw JetStream publish-and-consume of the very episodes the mesh produced (the figure the mesh is held to),
// and, to show where the rest goes, the episodes' env traffic as bare core NATS request/replies.
type benchMeshCmd struct {
	Seconds     float64 `name:"seconds" default:"20" help:"Measured time of the mesh (after the warm-up)."`
	Warmup      float64 `name:"warmup" default:"3" help:"Seconds of mesh traffic before measuring."`
	Turns       int     `name:"turns" default:"4" help:"Turns of every zero-latency episode."`
	GroupSize   int     `name:"group-size" default:"8" help:"GRPO group size G."`
	BatchSize   int     `name:"batch-size" default:"64" help:"Batch size B in episodes."`
	Eta         int     `name:"eta" default:"2" help:"Staleness bound."`
	Concurrency int     `name:"concurrency" default:"64" help:"Episodes the rollout replica plays at once."`
	Bits        int     `name:"bits" default:"10" help:"log2 of the policy's weights (10, the smallest: a trivial policy)."`
	RawMin      int     `name:"raw-min" default:"50000" help:"Fewest episodes each raw publish-and-consume round moves (it moves as many as the mesh trained, at least this many); the raw request/reply rounds play as many groups as this makes episodes."`
	RawWindow   int     `name:"raw-window" default:"256" help:"Raw publishes in flight (asynchronous publish with Nats-Msg-Id)."`
	RawRounds   int     `name:"raw-rounds" default:"3" help:"Rounds of each raw measurement; the fastest counts (a round starved by other work on the machine does not set the limit)."`
	Loopback    bool    `name:"loopback" help:"Connect every client, the services' and the raw rounds', over the server's loopback TCP port instead of in-process."`
	JSON        bool    `name:"json" help:"Print one JSON object instead of a table."`
	LogLevel    string  `name:"log-level" default:"error" help:"Level of the services' log on stderr."`
	CPUProfile  string  `name:"cpuprofile" help:"Write a CPU profile of the measured mesh window to this file (go tool pprof)."`
}

// meshBenchResult is what bench mesh prints with --json.
type meshBenchResult struct {
	MeshEpisodesPerS float64 `json:"mesh_episodes_per_s"`
	MeshEnvStepsPerS float64 `json:"mesh_env_steps_per_s"`
	RawEpisodesPerS  float64 `json:"raw_episodes_per_s"`
	RawMBPerS        float64 `json:"raw_mb_per_s"`
	Ratio            float64 `json:"ratio"`
	EpisodeBytes     int     `json:"episode_bytes"`
	TurnsPerEpisode  float64 `json:"turns_per_episode"`
	MeshEpisodes     int64   `json:"mesh_episodes"`
	MeshSeconds      float64 `json:"mesh_seconds"`
	RawEpisodes      int     `json:"raw_episodes"`
	RawSeconds       float64 `json:"raw_seconds"`
	PolicyVersions   int64   `json:"policy_versions"`
	TrainerBusy      float64 `json:"trainer_busy"`
	// EnvCallsPerBatch is the mean number of env starts and steps per batch request in the window.
	EnvCallsPerBatch float64 `json:"env_calls_per_batch"`
	// CPU time of the whole process (services, embedded server, everything) per episode moved: what each
	// path costs, whatever else the machine is running.
	MeshCPUMicros float64 `json:"mesh_cpu_us_per_episode"`
	RawCPUMicros  float64 `json:"raw_cpu_us_per_episode"`
	// The env traffic of the same episodes as bare core NATS request/replies (1 + turns per group, G calls
	// each, as the env client batches them), and both raw loads one after the other on the same machine:
	// 1 / (1/raw + 1/raw_env).
	RawEnvEpisodesPerS  float64 `json:"raw_env_episodes_per_s"`
	RawEnvEpisodes      int     `json:"raw_env_episodes"`
	RawEnvSeconds       float64 `json:"raw_env_seconds"`
	RawEnvCPUMicros     float64 `json:"raw_env_cpu_us_per_episode"`
	RawBothEpisodesPerS float64 `json:"raw_both_episodes_per_s"`
	RatioBoth           float64 `json:"ratio_to_raw_both"`
	// Bytes the server received per trained episode in the mesh's window (publishes of every kind), the
	// trainer's checkpoint object at the end of it, and that size times the versions of the window per
	// episode: the checkpoint's share of what the services send to be stored.
	MeshBytesInPerEpisode     float64 `json:"mesh_bytes_in_per_episode"`
	CheckpointBytes           uint64  `json:"checkpoint_bytes"`
	CheckpointBytesPerEpisode float64 `json:"checkpoint_bytes_per_episode"`
	// Connection is how every client reached the server: "in-process" or "loopback tcp" (--loopback).
	Connection string `json:"connection"`
	// Messages the server received and sent (publishes in, deliveries out, JetStream's acks and API calls
	// included) per episode, and the process's CPU per such message, on each path: whether the mesh pays
	// for more messages or for dearer ones.
	MeshMsgsPerEpisode float64 `json:"mesh_msgs_per_episode"`
	RawMsgsPerEpisode  float64 `json:"raw_msgs_per_episode"`
	MeshCPUMicrosMsg   float64 `json:"mesh_cpu_us_per_msg"`
	RawCPUMicrosMsg    float64 `json:"raw_cpu_us_per_msg"`
}

func (c *benchMeshCmd) Validate() error {
	var errs []error
	if c.Seconds <= 0 || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--seconds %v must be positive and --warmup %v not negative", c.Seconds, c.Warmup))
	}
	if c.Turns < 1 || c.RawMin < 1 || c.RawWindow < 1 || c.RawRounds < 1 {
		errs = append(errs, errors.New("--turns, --raw-min, --raw-window and --raw-rounds must be at least 1"))
	}
	return errors.Join(errs...)
}

func (c *benchMeshCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	res, err := c.run(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("zero-latency env, %d turns per episode, policy of 2^%d weights, G=%d, B=%d, eta=%d, %d episodes at once; raw: fastest of %d rounds; clients %s\n",
		c.Turns, c.Bits, c.GroupSize, c.BatchSize, c.Eta, c.Concurrency, c.RawRounds, res.Connection)
	fmt.Printf("mesh: %.1f env calls per batch message, %d policy versions, trainer busy %.0f%%\n", res.EnvCallsPerBatch, res.PolicyVersions, 100*res.TrainerBusy)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "path\tepisodes/s\tenv steps/s\tepisodes\tseconds\tCPU µs/episode\tmsgs/episode\tCPU µs/msg\t\n")
	fmt.Fprintf(w, "mesh: env → rollout → replay-buffer → normalizer → trainer\t%.0f\t%.0f\t%d\t%.1f\t%.0f\t%.1f\t%.1f\t\n", res.MeshEpisodesPerS, res.MeshEnvStepsPerS, res.MeshEpisodes, res.MeshSeconds, res.MeshCPUMicros, res.MeshMsgsPerEpisode, res.MeshCPUMicrosMsg)
	fmt.Fprintf(w, "raw JetStream publish + consume of the same %d B episodes\t%.0f\t-\t%d\t%.1f\t%.0f\t%.1f\t%.1f\t\n", res.EpisodeBytes, res.RawEpisodesPerS, res.RawEpisodes, res.RawSeconds, res.RawCPUMicros, res.RawMsgsPerEpisode, res.RawCPUMicrosMsg)
	fmt.Fprintf(w, "raw core NATS request/reply of %d-call batches, %d per group\t%.0f\t%.0f\t%d\t%.1f\t%.0f\t\t\t\n", c.GroupSize, 1+c.Turns, res.RawEnvEpisodesPerS, float64(c.Turns)*res.RawEnvEpisodesPerS, res.RawEnvEpisodes, res.RawEnvSeconds, res.RawEnvCPUMicros)
	fmt.Fprintf(w, "raw both (JetStream, then request/reply)\t%.0f\t\t\t\t\t\t\t\n", res.RawBothEpisodesPerS)
	fmt.Fprintf(w, "mesh: bytes sent to the server per episode\t%.0f\t\t\t\t\t\t\t\n", res.MeshBytesInPerEpisode)
	fmt.Fprintf(w, "  of them the trainer's checkpoint (%d B per version)\t%.0f\t\t\t\t\t\t\t\n", res.CheckpointBytes, res.CheckpointBytesPerEpisode)
	fmt.Fprintf(w, "mesh / raw JetStream\t%.1f%%\t\t\t\t\t\t\t\n", 100*res.Ratio)
	fmt.Fprintf(w, "mesh / raw both\t%.1f%%\t\t\t\t\t\t\t\n", 100*res.RatioBoth)
	return w.Flush()
}

func (c *benchMeshCmd) run(ctx context.Context) (*meshBenchResult, error) {
	log, err := logging.New("bench", c.LogLevel, false, os.Stderr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "jetrl-bench-mesh-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()

	res := &meshBenchResult{Connection: "in-process"}
	if c.Loopback {
		res.Connection = "loopback tcp"
	}
	if err := c.runMesh(ctx, srv, log, res); err != nil {
		return nil, err
	}
	if err := c.runRaw(ctx, srv, log, res); err != nil {
		return nil, err
	}
	if err := c.runRawEnv(ctx, srv, log, res); err != nil {
		return nil, err
	}
	if res.RawEpisodesPerS > 0 {
		res.Ratio = res.MeshEpisodesPerS / res.RawEpisodesPerS
	}
	if res.RawEpisodesPerS > 0 && res.RawEnvEpisodesPerS > 0 {
		res.RawBothEpisodesPerS = 1 / (1/res.RawEpisodesPerS + 1/res.RawEnvEpisodesPerS)
		res.RatioBoth = res.MeshEpisodesPerS / res.RawBothEpisodesPerS
	}
	return res, nil
}

// checkpointBytes is the size of the trainer's checkpoint object as it stands: what the trainer stores with
// every version.
func (c *benchMeshCmd) checkpointBytes(ctx context.Context, srv *bus.Embedded, log zerolog.Logger) (uint64, error) {
	nc, err := bus.Connect(ctx, srv.URL(), "jetrl-bench-checkpoint", log, c.dial(srv)...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return 0, err
	}
	obs, err := js.ObjectStore(ctx, proto.BucketCheckpoints)
	if err != nil {
		return 0, fmt.Errorf("object store %s: %w", proto.BucketCheckpoints, err)
	}
	info, err := obs.GetInfo(ctx, proto.KeyCheckpoint)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s: %w", proto.KeyCheckpoint, err)
	}
	return info.Size, nil
}

// dial is how every client of the run reaches the server: in-process, as the in-process runner's services
// do, unless --loopback.
func (c *benchMeshCmd) dial(srv *bus.Embedded) []nats.Option {
	if c.Loopback {
		return nil
	}
	return []nats.Option{srv.InProcess()}
}

// meshRawEnvSubject is where the raw env round trips are answered.
const meshRawEnvSubject = "jetrl.bench.env"

// runRawEnv does the core NATS request/replies of as many episodes as the raw JetStream run moved, the way
// the mesh's env client sends them: per group of G episodes one start batch and one step batch per turn
// (1 + turns request/replies), each carrying G encoded calls of a zero-latency turn and answered with G
// encoded results, at once, by a bare subscriber on its own connection, from as many requesters as the
// rollout plays groups at once. No JetStream, no env host logic, no policy: what NATS itself costs for an
// episode's env traffic.
func (c *benchMeshCmd) runRawEnv(ctx context.Context, srv *bus.Embedded, log zerolog.Logger, res *meshBenchResult) error {
	fam := benchtask.NewZero(c.Turns)
	inst, err := fam.New(proto.SplitTrain, 1)
	if err != nil {
		return err
	}
	open := inst.Start()
	step := inst.Step(open.Admissible[0])
	req := proto.EnvStepBatch{Schema: proto.SchemaVersion}
	rep := proto.EnvBatchReply{Schema: proto.SchemaVersion}
	for i := range c.GroupSize {
		req.Steps = append(req.Steps, proto.EnvStepRequest{Schema: proto.SchemaVersion, SessionID: fmt.Sprintf("bench-host-%d", i), Call: open.Admissible[0]})
		rep.Results = append(rep.Results, proto.EnvBatchResult{Index: i, Step: &proto.EnvStepReply{Schema: proto.SchemaVersion,
			Observation: step.Observation, Admissible: step.Admissible, Status: step.Status, Turn: 1}})
	}
	reqData, err := codec.Marshal(req, proto.MaxEnvBatchBytes)
	if err != nil {
		return err
	}
	repData, err := codec.Marshal(rep, proto.MaxEnvBatchBytes)
	if err != nil {
		return err
	}
	host, err := bus.Connect(ctx, srv.URL(), "jetrl-bench-raw-env-host", log, c.dial(srv)...)
	if err != nil {
		return err
	}
	defer host.Close()
	sub, err := host.Subscribe(meshRawEnvSubject, func(m *nats.Msg) { _ = m.Respond(repData) })
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := host.Flush(); err != nil {
		return err
	}
	client, err := bus.Connect(ctx, srv.URL(), "jetrl-bench-raw-env-client", log, c.dial(srv)...)
	if err != nil {
		return err
	}
	defer client.Close()
	groups := max(c.RawMin/c.GroupSize, 100)
	requesters := max(c.Concurrency/c.GroupSize, 1)
	for round := 0; round < c.RawRounds; round++ {
		var next atomic.Int64
		errs := make(chan error, requesters)
		start, cpu0 := time.Now(), processCPU()
		var wg sync.WaitGroup
		for range requesters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(groups) {
					for range 1 + c.Turns {
						if _, err := client.RequestWithContext(ctx, meshRawEnvSubject, reqData); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return fmt.Errorf("raw env request: %w", err)
		}
		secs := time.Since(start).Seconds()
		episodes := groups * c.GroupSize
		if rate := float64(episodes) / secs; rate > res.RawEnvEpisodesPerS {
			res.RawEnvEpisodesPerS, res.RawEnvEpisodes, res.RawEnvSeconds = rate, episodes, secs
			res.RawEnvCPUMicros = float64((processCPU() - cpu0).Microseconds()) / float64(episodes)
		}
	}
	return nil
}

// runMesh runs the five services with the zero-latency family and counts what the trainer trained and what
// the rollout played over the measured window.
func (c *benchMeshCmd) runMesh(ctx context.Context, srv *bus.Embedded, log zerolog.Logger, res *meshBenchResult) error {
	url := srv.URL()
	tcfg := trainer.DefaultConfig()
	tcfg.Model = policy.Config{Bits: c.Bits, Seed: 1}
	m, err := mesh.Start(ctx, mesh.Config{
		NATSURL: url, Dial: c.dial(srv), Tasks: []string{benchtask.ZeroName}, Seed: 1,
		GroupSize: c.GroupSize, BatchSize: c.BatchSize, Eta: c.Eta,
		Trainer: tcfg, Normalizer: normalizer.DefaultConfig(),
		Rollout:  rollout.Config{Concurrency: c.Concurrency},
		Families: task.Registry{benchtask.ZeroName: benchtask.NewZero(c.Turns)},
		Log:      log,
	})
	if err != nil {
		return err
	}
	defer m.Stop()
	if err := m.WaitVersion(ctx, 0); err != nil {
		return err
	}
	if err := m.StartRollouts(ctx); err != nil {
		return err
	}
	if err := meshSleep(ctx, time.Duration(c.Warmup*float64(time.Second))); err != nil {
		return err
	}
	snap := func() (trainer.Stats, rollout.Status, time.Time) {
		return m.Trainer.Stats(), m.Rollouts[0].Status(), time.Now()
	}
	t0, r0, at0 := snap()
	cpu0 := processCPU()
	tr0, err := srv.Traffic()
	if err != nil {
		return err
	}
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
	if err := meshSleep(ctx, time.Duration(c.Seconds*float64(time.Second))); err != nil {
		return err
	}
	t1, r1, at1 := snap()
	cpu := processCPU() - cpu0
	tr1, err := srv.Traffic()
	if err != nil {
		return err
	}
	secs := at1.Sub(at0).Seconds()
	res.MeshSeconds = secs
	res.MeshEpisodes = t1.EpisodesTrained - t0.EpisodesTrained
	res.MeshEpisodesPerS = float64(res.MeshEpisodes) / secs
	if res.MeshEpisodes > 0 {
		res.MeshCPUMicros = float64(cpu.Microseconds()) / float64(res.MeshEpisodes)
		res.MeshMsgsPerEpisode, res.MeshCPUMicrosMsg = perMsg(tr1.Sub(tr0), cpu, res.MeshEpisodes)
	}
	res.MeshEnvStepsPerS = float64(r1.Turns-r0.Turns) / secs
	if played := r1.Published - r0.Published; played > 0 {
		res.TurnsPerEpisode = float64(r1.Turns-r0.Turns) / float64(played)
	}
	if n := r1.EnvBatches - r0.EnvBatches; n > 0 {
		res.EnvCallsPerBatch = float64(r1.EnvBatchedCalls-r0.EnvBatchedCalls) / float64(n)
	}
	res.PolicyVersions = t1.Version - t0.Version
	res.TrainerBusy = t1.BusyFraction
	if err := m.Err(); err != nil {
		return err
	}
	if res.MeshEpisodes == 0 {
		return errors.New("bench mesh: the trainer trained nothing in the measured window")
	}
	res.MeshBytesInPerEpisode = float64(tr1.Sub(tr0).InBytes) / float64(res.MeshEpisodes)
	if res.CheckpointBytes, err = c.checkpointBytes(ctx, srv, log); err != nil {
		return err
	}
	res.CheckpointBytesPerEpisode = float64(res.CheckpointBytes) * float64(res.PolicyVersions) / float64(res.MeshEpisodes)
	return nil
}

// meshRawStream is where the raw measurement publishes: the episodes stream's settings under another name.
const (
	meshRawStream  = "JETRL_BENCH_RAW"
	meshRawSubject = "jetrl.bench.raw"
)

// runRaw publishes the episodes the mesh produced (their encoded bytes, as stored) to a stream configured
// like the episodes stream, each with its own Nats-Msg-Id, while a durable pull consumer acks them one by
// one: what NATS itself carries of this traffic on this machine.
func (c *benchMeshCmd) runRaw(ctx context.Context, srv *bus.Embedded, log zerolog.Logger, res *meshBenchResult) error {
	url := srv.URL()
	pc, err := bus.Connect(ctx, url, "jetrl-bench-raw-pub", log, c.dial(srv)...)
	if err != nil {
		return err
	}
	defer pc.Close()
	cc, err := bus.Connect(ctx, url, "jetrl-bench-raw-sub", log, c.dial(srv)...)
	if err != nil {
		return err
	}
	defer cc.Close()
	pjs, err := jetstream.New(pc, jetstream.WithPublishAsyncMaxPending(c.RawWindow))
	if err != nil {
		return err
	}
	cjs, err := bus.JetStream(cc)
	if err != nil {
		return err
	}
	samples, err := meshSampleEpisodes(ctx, pjs, 1024)
	if err != nil {
		return err
	}
	total := 0
	for _, s := range samples {
		total += len(s)
	}
	res.EpisodeBytes = total / len(samples)

	var spec proto.StreamSpec
	for _, s := range proto.Streams {
		if s.Name == proto.StreamEpisodes {
			spec = s
		}
	}
	if _, err := pjs.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: meshRawStream, Subjects: []string{meshRawSubject}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
		MaxBytes: spec.MaxBytes, MaxAge: spec.MaxAge, MaxMsgSize: spec.MaxMsg, Duplicates: proto.DedupWindow, Discard: jetstream.DiscardOld,
	}); err != nil {
		return fmt.Errorf("raw stream: %w", err)
	}
	cons, err := cjs.CreateOrUpdateConsumer(ctx, meshRawStream, bus.ConsumerConfig("bench-raw", meshRawSubject, 1<<15, 30*time.Second))
	if err != nil {
		return fmt.Errorf("raw consumer: %w", err)
	}
	n := max(int(res.MeshEpisodes), c.RawMin)
	var received atomic.Int64
	var target atomic.Int64
	got := make(chan struct{}, 1)
	cctx, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if received.Add(1) == target.Load() {
			got <- struct{}{}
		}
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("raw consume: %w", err)
	}
	defer cctx.Stop()
	// Rounds, the best one counted: a round that the machine's other work starved does not set the limit.
	for round := 0; round < c.RawRounds; round++ {
		target.Store(int64((round + 1) * n))
		start, cpu0 := time.Now(), processCPU()
		tr0, err := srv.Traffic()
		if err != nil {
			return err
		}
		for i := 0; i < n; {
			_, err := pjs.PublishAsync(meshRawSubject, samples[i%len(samples)], jetstream.WithMsgID(fmt.Sprintf("raw-%d-%d", round, i)))
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				select { // the window is full and slow to drain: wait for it, then send this one again
				case <-pjs.PublishAsyncComplete():
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("raw publish: %w", err)
			}
			i++
		}
		select {
		case <-pjs.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-got:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return fmt.Errorf("raw consume: %d of %d messages after a minute", received.Load(), target.Load())
		}
		secs := time.Since(start).Seconds()
		cpu := processCPU() - cpu0
		// The consumer's last acks may still be buffered, and the server adds what it read or delivered to
		// its counters after it has answered: counted once they settle (not timed).
		tr1, err := settledTraffic(ctx, srv, pc, cc)
		if err != nil {
			return err
		}
		if rate := float64(n) / secs; rate > res.RawEpisodesPerS {
			res.RawCPUMicros = float64(cpu.Microseconds()) / float64(n)
			res.RawMsgsPerEpisode, res.RawCPUMicrosMsg = perMsg(tr1.Sub(tr0), cpu, int64(n))
			res.RawEpisodes, res.RawSeconds, res.RawEpisodesPerS = n, secs, rate
			res.RawMBPerS = float64(n) * float64(res.EpisodeBytes) / secs / 1e6
		}
	}
	return nil
}

// settledTraffic reads the server's message counters once what the connections sent has been counted.
// The server answers a PING before it adds the messages it parsed in the same read to its counters, so each
// connection is flushed twice (the second PING is read only after the first read's counts are added); it
// also counts a delivery after queueing it, so the counters are read until two reads 20 ms apart agree (at
// most a second).
func settledTraffic(ctx context.Context, srv *bus.Embedded, conns ...*nats.Conn) (bus.Traffic, error) {
	for _, nc := range conns {
		for range 2 {
			if err := nc.FlushTimeout(10 * time.Second); err != nil { // FlushWithContext needs a deadline, which the command line's context lacks
				return bus.Traffic{}, err
			}
		}
	}
	last, err := srv.Traffic()
	if err != nil {
		return bus.Traffic{}, err
	}
	for range 50 {
		if err := meshSleep(ctx, 20*time.Millisecond); err != nil {
			return bus.Traffic{}, err
		}
		tr, err := srv.Traffic()
		if err != nil {
			return bus.Traffic{}, err
		}
		if tr == last {
			break
		}
		last = tr
	}
	return last, nil
}

// meshSampleEpisodes reads up to n stored episodes (their encoded bytes) from the episodes stream.
func meshSampleEpisodes(ctx context.Context, js jetstream.JetStream, n int) ([][]byte, error) {
	cons, err := js.OrderedConsumer(ctx, proto.StreamEpisodes, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("read episodes: %w", err)
	}
	batch, err := cons.FetchNoWait(n)
	if err != nil {
		return nil, fmt.Errorf("read episodes: %w", err)
	}
	var out [][]byte
	for m := range batch.Messages() {
		out = append(out, m.Data())
	}
	if len(out) == 0 {
		return nil, errors.New("read episodes: the episodes stream is empty")
	}
	return out, nil
}

// perMsg is the server's messages per episode over a window and the process's CPU per message.
func perMsg(tr bus.Traffic, cpu time.Duration, episodes int64) (msgsPerEpisode, cpuMicrosPerMsg float64) {
	if episodes <= 0 || tr.Msgs() <= 0 {
		return 0, 0
	}
	return float64(tr.Msgs()) / float64(episodes), float64(cpu.Microseconds()) / float64(tr.Msgs())
}

func meshSleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
