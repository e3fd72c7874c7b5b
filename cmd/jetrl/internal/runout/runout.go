// Package runout writes what a training run leaves in its output folder: metrics.jsonl, summary.json,
// the final weights and a PNG of success and reward per task over training.
package runout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Files in a run's output folder.
const (
	MetricsFile = "metrics.jsonl"
	SummaryFile = "summary.json"
	WeightsFile = "weights.bin"
	PlotFile    = "training.png"
	LogFile     = "jetrl.log"
	ConfigFile  = "config.yaml"
)

// Point is one line of metrics.jsonl: a training step or a held-out evaluation.
type Point struct {
	Kind            string               `json:"kind"` // "train" or "eval"
	Seconds         float64              `json:"seconds"`
	Version         int64                `json:"version"`
	EpisodesTrained int64                `json:"episodes_trained"`
	Loss            float64              `json:"loss,omitempty"`
	ClipFraction    float64              `json:"clip_fraction,omitempty"`
	MaxStaleness    int64                `json:"max_staleness,omitempty"`
	Tasks           map[string]TaskPoint `json:"tasks"`
}

// TaskPoint is one task's figures at a point.
type TaskPoint struct {
	Success    float64 `json:"success"`
	MeanReward float64 `json:"mean_reward"`
	Episodes   int     `json:"episodes"`
}

// Metrics appends points to metrics.jsonl and keeps them for the plot.
type Metrics struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	points []Point
}

// OpenMetrics creates (truncates) metrics.jsonl in dir.
func OpenMetrics(dir string) (*Metrics, error) {
	f, err := os.Create(filepath.Join(dir, MetricsFile))
	if err != nil {
		return nil, err
	}
	return &Metrics{f: f, w: bufio.NewWriter(f)}, nil
}

// Add writes one point.
func (m *Metrics) Add(p Point) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.points = append(m.points, p)
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := m.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return m.w.Flush()
}

// Points returns a copy of the points written.
func (m *Metrics) Points() []Point {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Point(nil), m.points...)
}

// Close flushes and closes the file.
func (m *Metrics) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.w.Flush(); err != nil {
		return err
	}
	return m.f.Close()
}

// TaskSummary is one task's line of summary.json.
type TaskSummary struct {
	HeldoutSuccessBefore    float64 `json:"heldout_success_before"`
	HeldoutSuccessAfter     float64 `json:"heldout_success_after"`
	HeldoutMeanRewardBefore float64 `json:"heldout_mean_reward_before"`
	HeldoutMeanRewardAfter  float64 `json:"heldout_mean_reward_after"`
	EvalEpisodes            int     `json:"eval_episodes"`
	EpisodesTrained         int64   `json:"episodes_trained"`
}

// Staleness of the run.
type Staleness struct {
	Eta             int   `json:"eta"`
	MaxObserved     int64 `json:"max_observed"`
	DroppedEpisodes int64 `json:"dropped_episodes"`
	// CutEpisodes are members still playing when the replay-buffer took their group without them (--cut).
	CutEpisodes int64 `json:"cut_playing"`
}

// Summary is summary.json.
type Summary struct {
	Tasks           map[string]TaskSummary `json:"tasks"`
	EpisodesTrained int64                  `json:"episodes_trained"`
	PolicyVersion   int64                  `json:"policy_version"`
	WallSeconds     float64                `json:"wall_seconds"`
	Staleness       Staleness              `json:"staleness"`
	InfraFailures   int64                  `json:"infra_failures"`
	// EvalsDone and EvalsFailed count the held-out evaluations during training that were recorded and that
	// failed (the failures' errors are in the run's log); the evaluations before and after are not counted.
	EvalsDone   int            `json:"heldout_evals_during_training"`
	EvalsFailed int            `json:"heldout_evals_failed"`
	Seed        uint64         `json:"seed"`
	Config      map[string]any `json:"config"`
	// Interrupted says training was cut short by an interrupt before its budget ran out.
	Interrupted bool `json:"interrupted,omitempty"`
}

// WriteJSON writes v as indented JSON to dir/name.
func WriteJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

// ReadSummary reads dir/summary.json.
func ReadSummary(dir string) (Summary, error) {
	var s Summary
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, SummaryFile), err)
	}
	return s, nil
}

// ReadMetrics reads dir/metrics.jsonl.
func ReadMetrics(dir string) ([]Point, error) {
	f, err := os.Open(filepath.Join(dir, MetricsFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pts []Point
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var p Point
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", filepath.Join(dir, MetricsFile), line, err)
		}
		pts = append(pts, p)
	}
	return pts, sc.Err()
}

// TaskNames lists the tasks that appear in points, sorted.
func TaskNames(points []Point) []string {
	seen := map[string]bool{}
	for _, p := range points {
		for t := range p.Tasks {
			seen[t] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Table renders per-task held-out figures as an aligned text table.
func Table(rows map[string]TaskSummary) string {
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	s := fmt.Sprintf("%-10s %9s %9s %12s %9s\n", "task", "before", "after", "reward after", "episodes")
	for _, n := range names {
		r := rows[n]
		s += fmt.Sprintf("%-10s %8.1f%% %8.1f%% %12.3f %9d\n", n, 100*r.HeldoutSuccessBefore, 100*r.HeldoutSuccessAfter, r.HeldoutMeanRewardAfter, r.EvalEpisodes)
	}
	return s
}
