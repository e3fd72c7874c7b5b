package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/logging"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
)

// benchMemoryCmd runs a training run with every service as its own OS process (the binaries jetrl-env,
// jetrl-rollout, jetrl-replay-buffer, jetrl-advantage-normalizer and jetrl-trainer) on an embedded server,
// with the settings of `jetrl up` recorded in the run config in KV, and samples each process's resident
// set size (VmRSS, /proc/<pid>/status) and Go heap in use (its /metrics) over a long window: memory stays
// flat if the end of the window is where its start was.
type benchMemoryCmd struct {
	Minutes     float64       `name:"minutes" default:"30" help:"Measured window, from the start sample (after the warm-up) to the end sample."`
	Warmup      time.Duration `name:"warmup" default:"1m" help:"Time from every service serving to the start sample."`
	SampleEvery time.Duration `name:"sample-every" default:"30s" help:"Sampling period (from the moment every service serves)."`
	Tasks       []string      `name:"tasks" default:"alfworld,db,kg,os,webshop" help:"Task families to train on; every other setting is jetrl up's default."`
	Seed        uint64        `name:"seed" default:"1" help:"Seed of the run (jetrl up --seed)."`
	Bin         string        `name:"bin" type:"path" help:"Folder of the five service binaries (default: the folder of this jetrl executable)."`
	Out         string        `name:"out" type:"path" help:"Folder to write samples.csv (as sampled), memory.json (the result and every sample) and each service's log to."`
	JSON        bool          `name:"json" help:"Print one JSON object instead of a table (progress still goes to stderr)."`
	Quiet       bool          `name:"quiet" help:"No progress on stderr."`
	LogLevel    string        `name:"log-level" default:"info" help:"Level of the services' logs, kept in files (the Go heap is read from the /metrics address logged at info)."`
	StopTimeout time.Duration `name:"stop-timeout" default:"30s" help:"How long a service may take to stop after SIGINT before it is killed."`
	From        string        `name:"from" type:"existingfile" help:"Summarise the samples of an earlier run's memory.json (--out) instead of running."`
}

// memServices are the services, one process each, in the order they start.
var memServices = []string{"env", "trainer", "advantage-normalizer", "replay-buffer", "rollout"}

// memServiceOrder is the order of the table: along the data path.
var memServiceOrder = []string{"env", "rollout", "replay-buffer", "advantage-normalizer", "trainer"}

// memStartTimeout bounds the time from starting the processes to every one of them serving.
const memStartTimeout = 2 * time.Minute

// memoryBenchResult is what bench memory prints with --json.
type memoryBenchResult struct {
	// Minutes is the measured window, from the start sample to the end sample.
	Minutes          float64  `json:"minutes"`
	WarmupSeconds    float64  `json:"warmup_seconds"`
	SampleEverySec   float64  `json:"sample_every_seconds"`
	WindowSamples    int      `json:"window_samples"`
	Tasks            []string `json:"tasks"`
	EpisodesTrained  int64    `json:"episodes_trained"`
	EpisodesInWindow int64    `json:"episodes_trained_window"`
	VersionStart     int64    `json:"policy_version_start"`
	VersionEnd       int64    `json:"policy_version_end"`
	// MaxGrowthPct is the largest growth_pct of the services, MaxGrowthService whose it is.
	MaxGrowthPct     float64                      `json:"max_growth_pct"`
	MaxGrowthService string                       `json:"max_growth_service"`
	Services         map[string]*memServiceResult `json:"services"`
}

// memServiceResult is one service process's memory over the window.
type memServiceResult struct {
	PID        int     `json:"pid"`
	RSSStartMB float64 `json:"rss_start_mb"`
	RSSEndMB   float64 `json:"rss_end_mb"`
	RSSMaxMB   float64 `json:"rss_max_mb"`
	// GrowthPct is (end - start) / start · 100.
	GrowthPct float64 `json:"growth_pct"`
	// SlopeMBPer10Min is the least-squares slope of RSS over the window's samples.
	SlopeMBPer10Min float64 `json:"slope_mb_per_10min"`
	// The same over the window's second half, and the largest RSS in each half: memory that levels off
	// once its bounded caches fill has a late slope near 0 and a late max near the early one.
	SlopeLateMBPer10Min float64 `json:"slope_late_mb_per_10min"`
	RSSMaxEarlyMB       float64 `json:"rss_max_early_mb"`
	RSSMaxLateMB        float64 `json:"rss_max_late_mb"`
	// The Go heap in use (go_memstats_heap_inuse_bytes) at the start and end samples, when it was read.
	HeapStartMB *float64 `json:"heap_inuse_start_mb,omitempty"`
	HeapEndMB   *float64 `json:"heap_inuse_end_mb,omitempty"`
}

// memSample is one sample of every service.
type memSample struct {
	// Seconds since every service was serving.
	Seconds float64 `json:"seconds"`
	// Phase is warmup, start, run or end; the window is start through end.
	Phase           string             `json:"phase"`
	Version         int64              `json:"policy_version"`
	EpisodesTrained int64              `json:"episodes_trained"`
	RSSMB           map[string]float64 `json:"rss_mb"`
	HeapMB          map[string]float64 `json:"heap_inuse_mb,omitempty"`
}

func (c *benchMemoryCmd) Validate() error {
	var errs []error
	if !(c.Minutes > 0) {
		errs = append(errs, fmt.Errorf("--minutes %v must be positive", c.Minutes))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--warmup %v must not be negative", c.Warmup))
	}
	if c.SampleEvery < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--sample-every %v must be at least 100ms", c.SampleEvery))
	}
	if c.StopTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--stop-timeout %v must be positive", c.StopTimeout))
	}
	if len(c.Tasks) == 0 {
		errs = append(errs, errors.New("--tasks is empty"))
	}
	families := builtin.Registry()
	for _, t := range c.Tasks {
		if _, err := families.Get(t); err != nil {
			errs = append(errs, fmt.Errorf("--tasks: %w", err))
		}
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		errs = append(errs, fmt.Errorf("--log-level %q: want one of debug, info, warn, error, disabled", c.LogLevel))
	}
	return errors.Join(errs...)
}

func (c *benchMemoryCmd) Run(g *globals) error {
	ctx, stop := signalContext()
	defer stop()
	var res *memoryBenchResult
	var err error
	if c.From != "" {
		res, err = memFromFile(c.From)
	} else {
		res, err = c.run(ctx)
	}
	if res != nil {
		if c.JSON {
			if perr := benchPrintJSON(res); perr != nil {
				return errors.Join(err, perr)
			}
		} else {
			c.printTable(res)
		}
	}
	return err
}

func (c *benchMemoryCmd) window() time.Duration {
	return time.Duration(c.Minutes * float64(time.Minute))
}

func (c *benchMemoryCmd) say(format string, args ...any) {
	if !c.Quiet {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

// run measures. A result comes back with a nil error, or with the error of a service that did not stop
// cleanly after the window (the measurement stands; the error says what went wrong at the end).
func (c *benchMemoryCmd) run(ctx context.Context) (*memoryBenchResult, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("bench memory reads each process's VmRSS from /proc/<pid>/status, which %s does not have: it runs on Linux only", runtime.GOOS)
	}
	bin, err := c.binDir()
	if err != nil {
		return nil, err
	}
	settings, err := memRunSettings(c.Tasks, c.Seed, c.Minutes, c.Out)
	if err != nil {
		return nil, err
	}
	logDir := c.Out
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "jetrl-bench-memory-logs-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(logDir)
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	var csvOut *memCSV
	if c.Out != "" {
		if csvOut, err = newMemCSV(filepath.Join(c.Out, "samples.csv")); err != nil {
			return nil, err
		}
		defer csvOut.Close()
	}
	storeDir, err := os.MkdirTemp("", "jetrl-bench-memory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(storeDir)
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: storeDir})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	log, err := logging.New("bench", "error", false, os.Stderr)
	if err != nil {
		return nil, err
	}
	admin, err := bus.Connect(ctx, srv.URL(), "jetrl-bench-memory", log)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	js, err := bus.JetStream(admin)
	if err != nil {
		return nil, err
	}
	if err := bus.EnsureTopology(ctx, js, 1); err != nil {
		return nil, err
	}
	j, err := settingsJSON(settings)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, proto.BucketRun)
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", proto.BucketRun, err)
	}
	if _, err := kv.Put(ctx, proto.KeyRunConfig, j); err != nil {
		return nil, fmt.Errorf("kv %s/%s: %w", proto.BucketRun, proto.KeyRunConfig, err)
	}

	c.say("bench memory: tasks %s, jetrl up's other defaults; the five services as processes from %s; a %v window after a %v warm-up, a sample every %v",
		strings.Join(c.Tasks, ","), bin, c.window(), c.Warmup, c.SampleEvery)
	m := &memMesh{exited: make(chan *memProc, len(memServices))}
	defer func() { _ = m.stop(c.StopTimeout) }()
	for _, name := range memServices {
		if err := m.start(bin, name, logDir, srv.URL(), c.LogLevel); err != nil {
			return nil, err
		}
	}
	if err := m.waitServing(ctx, admin, memStartTimeout); err != nil {
		return nil, err
	}
	c.say("every service serving (pids: %s); warming up for %v", m.pids(), c.Warmup)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	offsets, startIdx := memSchedule(c.Warmup, c.window(), c.SampleEvery)
	samples := make([]memSample, 0, len(offsets))
	var version, trained int64
	t0 := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, off := range offsets {
		timer.Reset(time.Until(t0.Add(off)))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped after %d of %d samples: %w", i, len(offsets), ctx.Err())
		case p := <-m.exited:
			return nil, m.earlyExit(p)
		case <-timer.C:
		}
		at := time.Since(t0)
		s, err := m.sample(ctx, client, admin)
		if err != nil {
			return nil, err
		}
		if s.Version < 0 { // the trainer did not answer this time: its last counters stand
			s.Version, s.EpisodesTrained = version, trained
		}
		version, trained = s.Version, s.EpisodesTrained
		s.Seconds = at.Seconds()
		s.Phase = memPhase(i, startIdx, len(offsets))
		samples = append(samples, s)
		if csvOut != nil {
			if err := csvOut.Write(s); err != nil {
				return nil, err
			}
		}
		c.say("[%7s %-6s] %s; policy version %d, %d episodes trained", at.Round(time.Second),
			s.Phase, memRSSLine(s), s.Version, s.EpisodesTrained)
	}
	res := memSummarize(samples, startIdx, m.pidMap())
	res.Tasks, res.WarmupSeconds, res.SampleEverySec = c.Tasks, c.Warmup.Seconds(), c.SampleEvery.Seconds()
	stopErr := m.stop(c.StopTimeout)
	if c.Out != "" {
		full := struct {
			*memoryBenchResult
			Samples []memSample `json:"samples"`
		}{res, samples}
		b, err := json.MarshalIndent(full, "", "  ")
		if err != nil {
			return res, errors.Join(stopErr, err)
		}
		if err := os.WriteFile(filepath.Join(c.Out, "memory.json"), append(b, '\n'), 0o644); err != nil {
			return res, errors.Join(stopErr, err)
		}
		c.say("wrote %s, %s and the services' logs (%s/<service>.log)", filepath.Join(c.Out, "samples.csv"), filepath.Join(c.Out, "memory.json"), c.Out)
	}
	return res, stopErr
}

// binDir is --bin, or the folder of this executable, once it holds all five service binaries.
func (c *benchMemoryCmd) binDir() (string, error) {
	dir := c.Bin
	if dir == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find the service binaries next to jetrl: %w (give --bin)", err)
		}
		if exe, err = filepath.EvalSymlinks(exe); err != nil {
			return "", err
		}
		dir = filepath.Dir(exe)
	}
	var missing []string
	for _, name := range memServices {
		fi, err := os.Stat(filepath.Join(dir, "jetrl-"+name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, "jetrl-"+name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("no executable %s in %s: build them with make build (into bin/, next to bin/jetrl) or give --bin",
			strings.Join(missing, ", "), dir)
	}
	return dir, nil
}

// memRunSettings are `jetrl up`'s settings at their defaults but for the tasks, seed, minutes and output
// folder, validated as jetrl up validates them: the run config every service process takes its settings from.
func memRunSettings(tasks []string, seed uint64, minutes float64, out string) (map[string]any, error) {
	var up upCmd
	k, err := kong.New(&up, kong.Configuration(loadRunConfig), kong.Exit(func(int) {}))
	if err != nil {
		return nil, err
	}
	if _, err := k.Parse(nil); err != nil {
		return nil, fmt.Errorf("jetrl up defaults: %w", err)
	}
	up.Tasks, up.Seed, up.Minutes, up.Out = tasks, seed, minutes, out
	if err := up.Validate(); err != nil {
		return nil, err
	}
	return effectiveSettings(&up), nil
}

// memSchedule gives the sampling times from the moment every service serves: every `every` through the
// warm-up, the start sample at warmup, every `every` after it, and the end sample at warmup + window.
// start is the index of the start sample.
func memSchedule(warmup, window, every time.Duration) (offsets []time.Duration, start int) {
	for t := time.Duration(0); t < warmup; t += every {
		offsets = append(offsets, t)
	}
	start = len(offsets)
	offsets = append(offsets, warmup)
	for t := warmup + every; t < warmup+window; t += every {
		offsets = append(offsets, t)
	}
	return append(offsets, warmup+window), start
}

func memPhase(i, start, n int) string {
	switch {
	case i < start:
		return "warmup"
	case i == start:
		return "start"
	case i == n-1:
		return "end"
	}
	return "run"
}

// memSummarize computes every service's result over the window: samples[start:].
func memSummarize(samples []memSample, start int, pids map[string]int) *memoryBenchResult {
	win := samples[start:]
	first, last := win[0], win[len(win)-1]
	res := &memoryBenchResult{
		Minutes: (last.Seconds - first.Seconds) / 60, WindowSamples: len(win),
		EpisodesTrained: last.EpisodesTrained, EpisodesInWindow: last.EpisodesTrained - first.EpisodesTrained,
		VersionStart: first.Version, VersionEnd: last.Version, Services: map[string]*memServiceResult{},
	}
	for _, name := range memServiceOrder {
		r := &memServiceResult{PID: pids[name], RSSStartMB: first.RSSMB[name], RSSEndMB: last.RSSMB[name]}
		xs, ys := make([]float64, len(win)), make([]float64, len(win))
		var lateXs, lateYs []float64
		half := (last.Seconds - first.Seconds) / 2
		for i, s := range win {
			xs[i], ys[i] = (s.Seconds-first.Seconds)/60, s.RSSMB[name]
			r.RSSMaxMB = max(r.RSSMaxMB, s.RSSMB[name])
			if s.Seconds-first.Seconds >= half {
				lateXs, lateYs = append(lateXs, xs[i]), append(lateYs, ys[i])
				r.RSSMaxLateMB = max(r.RSSMaxLateMB, ys[i])
			} else {
				r.RSSMaxEarlyMB = max(r.RSSMaxEarlyMB, ys[i])
			}
		}
		r.SlopeLateMBPer10Min = 10 * memSlope(lateXs, lateYs)
		if r.RSSStartMB > 0 {
			r.GrowthPct = (r.RSSEndMB - r.RSSStartMB) / r.RSSStartMB * 100
		}
		r.SlopeMBPer10Min = 10 * memSlope(xs, ys)
		if h, ok := first.HeapMB[name]; ok {
			r.HeapStartMB = &h
		}
		if h, ok := last.HeapMB[name]; ok {
			r.HeapEndMB = &h
		}
		res.Services[name] = r
		if res.MaxGrowthService == "" || r.GrowthPct > res.MaxGrowthPct {
			res.MaxGrowthPct, res.MaxGrowthService = r.GrowthPct, name
		}
	}
	return res
}

// memFromFile summarises the samples an earlier run wrote to memory.json: the window starts at the sample
// whose phase is "start", and the run's settings (tasks, warm-up, period) come from the file.
func memFromFile(path string) (*memoryBenchResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var saved struct {
		memoryBenchResult
		Samples []memSample `json:"samples"`
	}
	if err := json.Unmarshal(data, &saved); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	start := slices.IndexFunc(saved.Samples, func(s memSample) bool { return s.Phase == "start" })
	if start < 0 || len(saved.Samples)-start < 2 {
		return nil, fmt.Errorf("%s: %d samples and no window (a start sample and one after it)", path, len(saved.Samples))
	}
	pids := map[string]int{}
	for name, r := range saved.Services {
		if r != nil {
			pids[name] = r.PID
		}
	}
	res := memSummarize(saved.Samples, start, pids)
	res.Tasks, res.WarmupSeconds, res.SampleEverySec = saved.Tasks, saved.WarmupSeconds, saved.SampleEverySec
	return res, nil
}

// memSlope is the least-squares slope of ys over xs (0 with fewer than two distinct xs).
func memSlope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 {
		return 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

func memRSSLine(s memSample) string {
	parts := make([]string, len(memServiceOrder))
	for i, name := range memServiceOrder {
		parts[i] = fmt.Sprintf("%s %.1f", name, s.RSSMB[name])
	}
	return "RSS MB: " + strings.Join(parts, ", ")
}

func (c *benchMemoryCmd) printTable(res *memoryBenchResult) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "service\tpid\tRSS start MB\tRSS end MB\tRSS max MB\tgrowth\tslope MB/10 min\tmax 1st half → 2nd half MB\tslope 2nd half\tGo heap in use MB (start → end)\n")
	for _, name := range memServiceOrder {
		r := res.Services[name]
		heap := "-"
		if r.HeapStartMB != nil && r.HeapEndMB != nil {
			heap = fmt.Sprintf("%.1f → %.1f", *r.HeapStartMB, *r.HeapEndMB)
		}
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%.1f\t%+.1f%%\t%+.2f\t%.1f → %.1f\t%+.2f\t%s\n", name, r.PID, r.RSSStartMB, r.RSSEndMB, r.RSSMaxMB, r.GrowthPct,
			r.SlopeMBPer10Min, r.RSSMaxEarlyMB, r.RSSMaxLateMB, r.SlopeLateMBPer10Min, heap)
	}
	_ = w.Flush()
	fmt.Printf("window %s after a %s warm-up, %d samples; tasks %s; %d episodes trained in all (%d in the window), policy version %d → %d\n",
		time.Duration(res.Minutes*float64(time.Minute)).Round(time.Second), time.Duration(res.WarmupSeconds*float64(time.Second)), res.WindowSamples, strings.Join(res.Tasks, ","),
		res.EpisodesTrained, res.EpisodesInWindow, res.VersionStart, res.VersionEnd)
	fmt.Printf("largest growth: %+.1f%% (%s)\n", res.MaxGrowthPct, res.MaxGrowthService)
}

// memCSV writes samples as they are taken, one row per service, so an interrupted run keeps what it had.
type memCSV struct {
	f *os.File
	w *csv.Writer
}

func newMemCSV(path string) (*memCSV, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := csv.NewWriter(f)
	if err := w.Write([]string{"seconds", "phase", "service", "rss_mb", "heap_inuse_mb", "policy_version", "episodes_trained"}); err != nil {
		f.Close()
		return nil, err
	}
	return &memCSV{f: f, w: w}, nil
}

func (c *memCSV) Write(s memSample) error {
	for _, name := range memServiceOrder {
		heap := ""
		if h, ok := s.HeapMB[name]; ok {
			heap = strconv.FormatFloat(h, 'f', 2, 64)
		}
		if err := c.w.Write([]string{strconv.FormatFloat(s.Seconds, 'f', 1, 64), s.Phase, name,
			strconv.FormatFloat(s.RSSMB[name], 'f', 2, 64), heap, strconv.FormatInt(s.Version, 10), strconv.FormatInt(s.EpisodesTrained, 10)}); err != nil {
			return err
		}
	}
	c.w.Flush()
	return c.w.Error()
}

func (c *memCSV) Close() error { return c.f.Close() }

// memProc is one service process; its output goes to its log file.
type memProc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	metrics string // its /metrics address, once read from its log
	done    chan struct{}
	err     error // how it exited; set before done closes
}

func (p *memProc) hasExited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// memMesh owns the service processes: stop signals, waits for and, past its timeout, kills every one.
type memMesh struct {
	procs   []*memProc
	exited  chan *memProc // each process once it has exited; buffered for all of them
	stopped bool
}

// start runs one service binary against url with its own log file, the rest of its settings from the run
// config (JETRL_* variables of this environment are not passed on, so that they cannot override it).
func (m *memMesh) start(bin, name, logDir, url, level string) error {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(filepath.Join(bin, "jetrl-"+name), "--nats", url, "--metrics-addr", "127.0.0.1:0", "--log-level", level)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = memProcAttr()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETRL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &memProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	m.procs = append(m.procs, p)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		m.exited <- p
	}()
	return nil
}

// waitServing waits until every service answers a NATS micro ping, then reads each one's /metrics address
// from its log.
func (m *memMesh) waitServing(ctx context.Context, nc *nats.Conn, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting []string
		for _, p := range m.procs {
			if !memPing(nc, p.name) {
				waiting = append(waiting, p.name)
			}
		}
		if len(waiting) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-m.exited:
			return m.earlyExit(p)
		case <-deadline.C:
			var tails []string
			for _, name := range waiting {
				tails = append(tails, fmt.Sprintf("last lines of the log of %s:\n%s", name, memTail(m.proc(name).log)))
			}
			return fmt.Errorf("%s not serving within %v of starting\n%s", strings.Join(waiting, ", "), timeout, strings.Join(tails, "\n"))
		case <-tick.C:
		}
	}
	for _, p := range m.procs {
		p.metrics = memMetricsAddr(p.log)
	}
	return nil
}

// memPing asks the service's NATS micro service for a ping (every jetrl service registers one).
func memPing(nc *nats.Conn, name string) bool {
	subject, err := micro.ControlSubject(micro.PingVerb, "jetrl-"+name, "")
	if err != nil {
		return false
	}
	_, err = nc.Request(subject, nil, 500*time.Millisecond)
	return err == nil
}

// memMetricsAddr finds the /metrics address in a service's "started" log line ("" if not logged).
func memMetricsAddr(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Message string `json:"message"`
			Metrics string `json:"metrics"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "started" && line.Metrics != "" {
			return line.Metrics
		}
	}
	return ""
}

func (m *memMesh) proc(name string) *memProc {
	for _, p := range m.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (m *memMesh) pids() string {
	parts := make([]string, len(m.procs))
	for i, p := range m.procs {
		parts[i] = fmt.Sprintf("%s %d", p.name, p.cmd.Process.Pid)
	}
	return strings.Join(parts, ", ")
}

func (m *memMesh) pidMap() map[string]int {
	out := map[string]int{}
	for _, p := range m.procs {
		out[p.name] = p.cmd.Process.Pid
	}
	return out
}

// earlyExit is the error of a service process that exited before it was asked to.
func (m *memMesh) earlyExit(p *memProc) error {
	how := "with status 0"
	if p.err != nil {
		how = p.err.Error()
	}
	return fmt.Errorf("service %s (pid %d) exited early (%s); last lines of its log:\n%s", p.name, p.cmd.Process.Pid, how, memTail(p.log))
}

// sample reads every process's RSS and Go heap, and the trainer's counters (Version -1 if it did not answer).
func (m *memMesh) sample(ctx context.Context, client *http.Client, nc *nats.Conn) (memSample, error) {
	s := memSample{RSSMB: map[string]float64{}, HeapMB: map[string]float64{}, Version: -1}
	for _, p := range m.procs {
		rss, err := memReadRSS(p.cmd.Process.Pid)
		if err != nil {
			if p.hasExited() {
				return s, m.earlyExit(p)
			}
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
		s.RSSMB[p.name] = rss
		if p.metrics != "" {
			if h, err := memHeapInuse(ctx, client, p.metrics); err == nil {
				s.HeapMB[p.name] = h
			}
		}
	}
	if msg, err := nc.Request(proto.SubjectStatus("trainer"), nil, 2*time.Second); err == nil {
		var body struct {
			Status struct {
				Version         int64 `json:"policy_version"`
				EpisodesTrained int64 `json:"episodes_trained"`
			} `json:"status"`
		}
		if json.Unmarshal(msg.Data, &body) == nil {
			s.Version, s.EpisodesTrained = body.Status.Version, body.Status.EpisodesTrained
		}
	}
	return s, nil
}

// memReadRSS is a process's resident set size in MB (VmRSS of /proc/<pid>/status).
func memReadRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return memParseVmRSS(b)
}

func memParseVmRSS(status []byte) (float64, error) {
	for _, line := range bytes.Split(status, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		fields := strings.Fields(string(rest))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want a number of kB", line)
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb / 1024, nil
	}
	return 0, errors.New("no VmRSS line in /proc/<pid>/status")
}

// memHeapInuse reads go_memstats_heap_inuse_bytes from a service's /metrics, in MB.
func memHeapInuse(ctx context.Context, client *http.Client, addr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return memParseHeapInuse(resp.Body)
}

func memParseHeapInuse(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil || math.IsNaN(v) {
				return 0, fmt.Errorf("go_memstats_heap_inuse_bytes %q", rest)
			}
			return v / (1 << 20), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no go_memstats_heap_inuse_bytes in /metrics")
}

// memTail is the end of a log file.
func memTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", path, err)
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return string(b)
}

// stop stops the processes one at a time in the reverse of their start order, the rollout first: SIGINT,
// then a wait of up to timeout, then SIGKILL. It returns how a process that had exited before ended, and
// which did not stop cleanly; a second call does nothing.
func (m *memMesh) stop(timeout time.Duration) error {
	if m.stopped {
		return nil
	}
	m.stopped = true
	var errs []error
	for i := len(m.procs) - 1; i >= 0; i-- {
		p := m.procs[i]
		if p.hasExited() {
			errs = append(errs, m.earlyExit(p))
			continue
		}
		if err := p.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("SIGINT to %s: %w", p.name, err))
		}
		wait := time.NewTimer(timeout)
		select {
		case <-p.done:
			if p.err != nil {
				errs = append(errs, fmt.Errorf("service %s (pid %d) exited with %v after SIGINT; last lines of its log:\n%s", p.name, p.cmd.Process.Pid, p.err, memTail(p.log)))
			}
		case <-wait.C:
			_ = p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("service %s (pid %d) did not stop within %v of SIGINT and was killed; last lines of its log:\n%s", p.name, p.cmd.Process.Pid, timeout, memTail(p.log)))
		}
		wait.Stop()
	}
	return errors.Join(errs...)
}
