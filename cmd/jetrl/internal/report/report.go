// Package report aggregates the runs of `jetrl report` (several seeds of the full method, its ablations
// and each family alone) into a markdown table, a JSON summary and PNG learning curves.
package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
)

// Method names of the report's runs.
const (
	Full          = "full"
	NoTaskNorm    = "no-task-norm"
	NoCrossPolicy = "no-cross-policy"
	Single        = "single" // each family trained alone; a run's method is "single-<family>"
)

// Paper is AgentRL's reported average (14B model) for the full method and the two ablations.
var Paper = map[string]float64{Full: 65.0, NoTaskNorm: 59.4, NoCrossPolicy: 60.7}

// Run is one finished run: its method, seed, summary and metrics.
type Run struct {
	Method  string
	Seed    uint64
	Summary runout.Summary
	Points  []runout.Point
}

// Stat is a mean and standard deviation over seeds (sample std; 0 for one seed).
type Stat struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	N    int     `json:"n"`
}

// NewStat summarises xs; NaN and infinite values are an error, not averaged in.
func NewStat(xs []float64) (Stat, error) {
	if len(xs) == 0 {
		return Stat{}, errors.New("no values")
	}
	sum := 0.0
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Stat{}, fmt.Errorf("value %v is not finite", x)
		}
		sum += x
	}
	s := Stat{Mean: sum / float64(len(xs)), N: len(xs)}
	if len(xs) > 1 {
		ss := 0.0
		for _, x := range xs {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(len(xs)-1))
	}
	return s, nil
}

// Row is one line of the table: a method's held-out success (and mean reward) per family.
type Row struct {
	Method  string          `json:"method"`
	Success map[string]Stat `json:"success"`
	Reward  map[string]Stat `json:"mean_reward"`
	// Mean is the average over families of the per-family mean success.
	Mean  float64 `json:"mean"`
	Seeds int     `json:"seeds"`
}

// Baseline is a reference policy's held-out figures per family.
type Baseline struct {
	Success map[string]float64 `json:"success"`
	Reward  map[string]float64 `json:"mean_reward"`
}

// Report is everything the markdown shows.
type Report struct {
	Tasks     []string            `json:"tasks"`
	Rows      []Row               `json:"rows"`
	Untrained Baseline            `json:"untrained"`
	Baselines map[string]Baseline `json:"baselines"` // "random", "solver"
	// GapToSingle is, per family, the full method's mean success minus the family-alone run's (points).
	GapToSingle map[string]float64 `json:"gap_to_single_points"`
	// PaperDirection says whether the full method beats both ablations, as in the paper.
	PaperDirection bool   `json:"paper_direction"`
	Notes          string `json:"notes,omitempty"`
}

// Build aggregates runs. Methods appear in the order full, no-task-norm, no-cross-policy, then
// "single" (one row whose family f column comes from the single-f runs), then any other.
func Build(tasks []string, runs []Run, baselines map[string]Baseline) (Report, error) {
	r := Report{Tasks: slices.Clone(tasks), Baselines: baselines, GapToSingle: map[string]float64{},
		Untrained: Baseline{Success: map[string]float64{}, Reward: map[string]float64{}}}
	byMethod := map[string][]Run{}
	for _, run := range runs {
		m := run.Method
		if strings.HasPrefix(m, Single+"-") {
			m = Single
		}
		byMethod[m] = append(byMethod[m], run)
	}
	order := []string{Full, NoTaskNorm, NoCrossPolicy, Single}
	for m := range byMethod {
		if !slices.Contains(order, m) {
			order = append(order, m)
		}
	}
	sort.SliceStable(order[4:], func(i, j int) bool { return order[4+i] < order[4+j] })
	for _, m := range order {
		rs := byMethod[m]
		if len(rs) == 0 {
			continue
		}
		row := Row{Method: m, Success: map[string]Stat{}, Reward: map[string]Stat{}}
		seeds := map[uint64]bool{}
		var means []float64
		for _, t := range tasks {
			var succ, rew []float64
			for _, run := range rs {
				if m == Single && run.Method != Single+"-"+t {
					continue
				}
				ts, ok := run.Summary.Tasks[t]
				if !ok {
					continue
				}
				seeds[run.Seed] = true
				succ, rew = append(succ, ts.HeldoutSuccessAfter), append(rew, ts.HeldoutMeanRewardAfter)
			}
			if len(succ) == 0 {
				continue
			}
			s, err := NewStat(succ)
			if err != nil {
				return r, fmt.Errorf("%s %s success: %w", m, t, err)
			}
			w, err := NewStat(rew)
			if err != nil {
				return r, fmt.Errorf("%s %s reward: %w", m, t, err)
			}
			row.Success[t], row.Reward[t] = s, w
			means = append(means, s.Mean)
		}
		if len(means) == 0 {
			continue
		}
		row.Seeds = len(seeds)
		mean, _ := NewStat(means)
		row.Mean = mean.Mean
		r.Rows = append(r.Rows, row)
	}
	// The untrained policy: the held-out figures before training, over every run that measured them.
	for _, t := range tasks {
		var succ, rew []float64
		for _, run := range runs {
			if ts, ok := run.Summary.Tasks[t]; ok {
				succ, rew = append(succ, ts.HeldoutSuccessBefore), append(rew, ts.HeldoutMeanRewardBefore)
			}
		}
		if len(succ) > 0 {
			s, err := NewStat(succ)
			if err != nil {
				return r, fmt.Errorf("untrained %s: %w", t, err)
			}
			w, err := NewStat(rew)
			if err != nil {
				return r, fmt.Errorf("untrained %s: %w", t, err)
			}
			r.Untrained.Success[t], r.Untrained.Reward[t] = s.Mean, w.Mean
		}
	}
	r.compare()
	return r, nil
}

// compare fills the comparisons between rows: the gap of the full method to each family alone, and
// whether both ablations fall below the full method.
func (r *Report) compare() {
	r.GapToSingle = map[string]float64{}
	full, okFull := r.row(Full)
	if single, ok := r.row(Single); ok && okFull {
		for _, t := range r.Tasks {
			f, okF := full.Success[t]
			s, okS := single.Success[t]
			if okF && okS {
				r.GapToSingle[t] = 100 * (f.Mean - s.Mean)
			}
		}
	}
	ntn, ok1 := r.row(NoTaskNorm)
	ncp, ok2 := r.row(NoCrossPolicy)
	r.PaperDirection = okFull && ok1 && ok2 && full.Mean > ntn.Mean && full.Mean > ncp.Mean
}

// Merge joins reports of the same families made by separate `jetrl report` runs (for instance the full
// method and each family alone in one, the ablations in another): a method's row comes from the last
// report that has it, the untrained policy's figures are averaged over the reports, and the comparisons are
// made anew. notes says where the rows come from.
func Merge(reports []Report, notes string) (Report, error) {
	if len(reports) == 0 {
		return Report{}, errors.New("merge: no reports")
	}
	out := Report{Tasks: slices.Clone(reports[0].Tasks), Baselines: map[string]Baseline{}, Notes: notes,
		Untrained: Baseline{Success: map[string]float64{}, Reward: map[string]float64{}}}
	rows := map[string]Row{}
	untrained := map[string][2][]float64{}
	for i, rep := range reports {
		if !slices.Equal(rep.Tasks, out.Tasks) {
			return Report{}, fmt.Errorf("merge: report %d has families %v, report 1 has %v", i+1, rep.Tasks, out.Tasks)
		}
		for _, row := range rep.Rows {
			rows[row.Method] = row
		}
		for name, bl := range rep.Baselines {
			out.Baselines[name] = bl
		}
		for _, t := range rep.Tasks {
			if s, ok := rep.Untrained.Success[t]; ok {
				u := untrained[t]
				u[0], u[1] = append(u[0], s), append(u[1], rep.Untrained.Reward[t])
				untrained[t] = u
			}
		}
	}
	order := []string{Full, NoTaskNorm, NoCrossPolicy, Single}
	var others []string
	for m := range rows {
		if !slices.Contains(order, m) {
			others = append(others, m)
		}
	}
	sort.Strings(others)
	for _, m := range append(order, others...) {
		if row, ok := rows[m]; ok {
			out.Rows = append(out.Rows, row)
		}
	}
	for t, u := range untrained {
		s, err := NewStat(u[0])
		if err != nil {
			return Report{}, fmt.Errorf("merge: untrained %s: %w", t, err)
		}
		w, err := NewStat(u[1])
		if err != nil {
			return Report{}, fmt.Errorf("merge: untrained %s: %w", t, err)
		}
		out.Untrained.Success[t], out.Untrained.Reward[t] = s.Mean, w.Mean
	}
	out.compare()
	return out, nil
}

func (r Report) row(method string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Method == method {
			return row, true
		}
	}
	return Row{}, false
}

var labels = map[string]string{
	Full:          "full method (all families together)",
	NoTaskNorm:    "without task advantage normalization",
	NoCrossPolicy: "without cross-policy sampling",
	Single:        "each family trained alone",
}

// Markdown renders the table and the comparisons. command is the line that regenerates the report.
func (r Report) Markdown(command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Held-out success per family (%%, mean ± std over seeds); webshop also as mean reward.\n\n")
	fmt.Fprintf(&b, "| method | seeds |")
	for _, t := range r.Tasks {
		fmt.Fprintf(&b, " %s |", t)
	}
	fmt.Fprintf(&b, " webshop reward | mean |\n|---|---:|")
	for range r.Tasks {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|\n")
	for _, row := range r.Rows {
		label := labels[row.Method]
		if label == "" {
			label = row.Method
		}
		fmt.Fprintf(&b, "| %s | %d |", label, row.Seeds)
		for _, t := range r.Tasks {
			if s, ok := row.Success[t]; ok {
				fmt.Fprintf(&b, " %.1f ± %.1f |", 100*s.Mean, 100*s.Std)
			} else {
				b.WriteString(" – |")
			}
		}
		if w, ok := row.Reward["webshop"]; ok {
			fmt.Fprintf(&b, " %.3f ± %.3f |", w.Mean, w.Std)
		} else {
			b.WriteString(" – |")
		}
		fmt.Fprintf(&b, " %.1f |\n", 100*row.Mean)
	}
	baseline := func(name string, bl Baseline) {
		fmt.Fprintf(&b, "| %s | – |", name)
		var sum float64
		var n int
		for _, t := range r.Tasks {
			if s, ok := bl.Success[t]; ok {
				fmt.Fprintf(&b, " %.1f |", 100*s)
				sum += s
				n++
			} else {
				b.WriteString(" – |")
			}
		}
		if w, ok := bl.Reward["webshop"]; ok {
			fmt.Fprintf(&b, " %.3f |", w)
		} else {
			b.WriteString(" – |")
		}
		if n > 0 {
			fmt.Fprintf(&b, " %.1f |\n", 100*sum/float64(n))
		} else {
			b.WriteString(" – |\n")
		}
	}
	baseline("untrained policy", r.Untrained)
	for _, name := range []string{"random", "solver"} {
		if bl, ok := r.Baselines[name]; ok {
			label := map[string]string{"random": "random policy", "solver": "scripted solver (reads hidden state)"}[name]
			baseline(label, bl)
		}
	}
	if len(r.GapToSingle) > 0 {
		b.WriteString("\nFull method minus the family trained alone (points):")
		worst := 0.0
		for _, t := range r.Tasks {
			if g, ok := r.GapToSingle[t]; ok {
				fmt.Fprintf(&b, " %s %+.1f;", t, g)
				worst = math.Min(worst, g)
			}
		}
		verdict := "within 5 points of the single-family model on every family"
		if worst < -5 {
			verdict = fmt.Sprintf("NOT within 5 points of the single-family model on every family (worst %.1f)", worst)
		}
		fmt.Fprintf(&b, " the multi-task model is %s.\n", verdict)
	}
	full, okFull := r.row(Full)
	ntn, ok1 := r.row(NoTaskNorm)
	ncp, ok2 := r.row(NoCrossPolicy)
	if okFull && ok1 && ok2 {
		fmt.Fprintf(&b, "\nAblations, mean over families: full %.1f, without task normalization %.1f (%+.1f), without cross-policy sampling %.1f (%+.1f). ",
			100*full.Mean, 100*ntn.Mean, 100*(ntn.Mean-full.Mean), 100*ncp.Mean, 100*(ncp.Mean-full.Mean))
		fmt.Fprintf(&b, "The paper (14B model) reports %.1f, %.1f and %.1f: both ablations lower. ", Paper[Full], Paper[NoTaskNorm], Paper[NoCrossPolicy])
		if r.PaperDirection {
			b.WriteString("These runs reproduce that direction.\n")
		} else {
			b.WriteString("These runs do not reproduce that direction.\n")
		}
	}
	if r.Notes != "" {
		fmt.Fprintf(&b, "\n%s\n", r.Notes)
	}
	if command != "" {
		fmt.Fprintf(&b, "\nRegenerate with `%s`.\n", command)
	}
	return b.String()
}
