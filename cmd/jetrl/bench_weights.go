package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/rollout"
	"github.com/jetrl/jetrl/services/trainer"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/jetrl/jetrl/shared/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchWeightsCmd measures how long a new policy version takes to reach every rollout: the trainer's publish
// (trainer.PublishWeights: weights to the Object Store, then the version record to KV) until each of several
// rollout weight pools, each on its own connection and watching KV as a rollout replica does
// (rollout.WeightsSource.Watch), has fetched, verified and loaded it. The weights are the built-in policy at
// the number of bits that gives each size (1 MB: 2^18 float32). Next to it, in the same run and alternating
// with it, a raw Object Store put and get of the same bytes with the client's defaults.
type benchWeightsCmd struct {
	Sizes      []int  `name:"sizes" default:"1,16,64" help:"Weight sizes in MB, powers of two from 1 to 256 (the policy at 18 to 26 bits)."`
	Rollouts   int    `name:"rollouts" default:"4" help:"Rollout weight pools watching for new versions, each on its own NATS connection."`
	Iterations int    `name:"iterations" default:"20" help:"Versions published per size (after one warm-up), each next to one raw put and get."`
	JSON       bool   `name:"json" help:"Print one JSON object keyed by size in MB instead of a table."`
	LogLevel   string `name:"log-level" default:"error" help:"Level of the log on stderr."`
	CPUProfile string `name:"cpuprofile" help:"Write a CPU profile of the whole run to this file (go tool pprof)."`
}

// weightsBenchSize is one size's result; bench weights --json prints them keyed by size in MB.
type weightsBenchSize struct {
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	RawMs      float64 `json:"raw_ms"`
	RawP99Ms   float64 `json:"raw_p99_ms"`
	Ratio      float64 `json:"ratio"` // p50_ms / raw_ms
	Bytes      int     `json:"bytes"`
	Rollouts   int     `json:"rollouts"`
	Iterations int     `json:"iterations"`
}

// weightsBits is the policy size in bits whose weight blob is mb MB (2^20 bytes of float32).
func weightsBits(mb int) (int, error) {
	if mb < 1 || mb&(mb-1) != 0 {
		return 0, fmt.Errorf("size %d MB: want a power of two", mb)
	}
	b := bits.TrailingZeros(uint(mb)) + 18
	if b < policy.MinBits || b > policy.MaxBits {
		return 0, fmt.Errorf("size %d MB: the policy holds 1 to %d MB", mb, 4<<(policy.MaxBits-20))
	}
	return b, nil
}

func (c *benchWeightsCmd) Validate() error {
	var errs []error
	if len(c.Sizes) == 0 {
		errs = append(errs, errors.New("--sizes is empty"))
	}
	for _, mb := range c.Sizes {
		if _, err := weightsBits(mb); err != nil {
			errs = append(errs, fmt.Errorf("--sizes: %w", err))
		}
	}
	if c.Rollouts < 1 || c.Iterations < 1 {
		errs = append(errs, fmt.Errorf("--rollouts %d and --iterations %d must be at least 1", c.Rollouts, c.Iterations))
	}
	return errors.Join(errs...)
}

func (c *benchWeightsCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
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
	res, err := c.run(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "weights\trollouts\tversions\tpublish → every rollout p50\tp99\traw put + get p50\traw p99\tp50 / raw\t\n")
	for _, mb := range c.Sizes {
		r := res[strconv.Itoa(mb)]
		fmt.Fprintf(w, "%d MB\t%d\t%d\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\t%.2fx\t\n", mb, r.Rollouts, r.Iterations, r.P50Ms, r.P99Ms, r.RawMs, r.RawP99Ms, r.Ratio)
	}
	return w.Flush()
}

func (c *benchWeightsCmd) run(ctx context.Context) (map[string]*weightsBenchSize, error) {
	log, err := logging.New("bench", c.LogLevel, false, os.Stderr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "jetrl-bench-weights-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()

	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	connect := func(name string) (jetstream.JetStream, error) {
		nc, err := bus.Connect(ctx, srv.URL(), name, log)
		if err != nil {
			return nil, err
		}
		conns = append(conns, nc)
		return bus.JetStream(nc)
	}
	js, err := connect("jetrl-bench-trainer")
	if err != nil {
		return nil, err
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		return nil, err
	}
	objects, err := js.ObjectStore(ctx, proto.BucketWeights)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, proto.BucketPolicy)
	if err != nil {
		return nil, err
	}

	// The rollouts' watchers, owned here: stopped and waited for before run returns.
	loaded := make(chan int64, 16*c.Rollouts)
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWatch(); wg.Wait() }()
	var rawGet jetstream.ObjectStore
	for i := 0; i < c.Rollouts; i++ {
		rjs, err := connect(fmt.Sprintf("jetrl-bench-rollout-%d", i))
		if err != nil {
			return nil, err
		}
		src, err := rollout.NewWeightsSource(ctx, rjs)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			rawGet = src.Objects // the raw get is made by a rollout's client, as the real one is
		}
		pool := rollout.NewWeightsPool(0, 0, false, uint64(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := src.Watch(wctx, rjs, pool, log, func(v int64) {
				select {
				case loaded <- v:
				case <-wctx.Done():
				}
			})
			if err != nil && wctx.Err() == nil {
				log.Error().Err(err).Msg("weights watch stopped")
			}
		}()
	}

	res := map[string]*weightsBenchSize{}
	version := int64(0)
	for _, mb := range c.Sizes {
		b, _ := weightsBits(mb)
		model, err := policy.New(policy.Config{Bits: b, Temperature: 1, InitScale: 0.01, Seed: int64(mb)})
		if err != nil {
			return nil, err
		}
		blob, err := model.MarshalBinary()
		if err != nil {
			return nil, err
		}
		model = nil
		var lat, raw []float64
		for i := 0; i <= c.Iterations; i++ { // iteration 0 warms up and is not counted
			version++
			t0 := time.Now()
			if _, err := trainer.PublishWeights(ctx, objects, kv, proto.PolicyVersion{Version: version}, blob); err != nil {
				return nil, err
			}
			if err := weightsWaitLoaded(ctx, loaded, version, c.Rollouts); err != nil {
				return nil, fmt.Errorf("%d MB, version %d: %w", mb, version, err)
			}
			d := time.Since(t0)
			if old := version - proto.WeightsHistory; old >= 0 {
				_ = objects.Delete(ctx, proto.WeightsObject(old)) // as the trainer does
			}
			name := fmt.Sprintf("bench-raw-%d", version)
			t0 = time.Now()
			if _, err := objects.PutBytes(ctx, name, blob); err != nil {
				return nil, fmt.Errorf("raw put: %w", err)
			}
			got, err := rawGet.GetBytes(ctx, name)
			if err != nil || len(got) != len(blob) {
				return nil, fmt.Errorf("raw get: %d bytes, %v", len(got), err)
			}
			dr := time.Since(t0)
			got = nil
			_ = objects.Delete(ctx, name)
			if i > 0 {
				lat, raw = append(lat, weightsMs(d)), append(raw, weightsMs(dr))
			}
		}
		r := &weightsBenchSize{P50Ms: weightsPercentile(lat, 50), P99Ms: weightsPercentile(lat, 99), RawMs: weightsPercentile(raw, 50), RawP99Ms: weightsPercentile(raw, 99),
			Bytes: len(blob), Rollouts: c.Rollouts, Iterations: c.Iterations}
		if r.RawMs > 0 {
			r.Ratio = r.P50Ms / r.RawMs
		}
		res[strconv.Itoa(mb)] = r
	}
	return res, nil
}

// weightsWaitLoaded waits until n loads of version v (one per rollout) have been reported.
func weightsWaitLoaded(ctx context.Context, loaded <-chan int64, v int64, n int) error {
	timeout := time.After(2 * time.Minute)
	for got := 0; got < n; {
		select {
		case lv := <-loaded:
			if lv == v {
				got++
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("%d of %d rollouts loaded it after 2 minutes", got, n)
		}
	}
	return nil
}

func weightsMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// weightsPercentile is the nearest-rank p-th percentile of xs (0 for none).
func weightsPercentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	k := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}
