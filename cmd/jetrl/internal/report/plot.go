package report

import (
	"fmt"
	"os"
	"strings"

	"github.com/jetrl/jetrl/cmd/jetrl/internal/runout"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Curve is a method's held-out success on one family over wall time, averaged over seeds.
type Curve struct {
	Method string
	XY     plotter.XYs
}

// Curves averages, per method and family, the k-th held-out evaluation of every seed (time and success);
// evaluations run on a fixed period, so the k-th of each seed falls at about the same time. A point is
// kept while at least half of the seeds have it.
func Curves(tasks []string, runs []Run) map[string][]Curve {
	out := map[string][]Curve{}
	for _, t := range tasks {
		byMethod := map[string][][]plotter.XY{}
		var methods []string
		for _, run := range runs {
			m := run.Method
			if strings.HasPrefix(m, Single+"-") {
				if m != Single+"-"+t {
					continue
				}
				m = Single
			}
			var xy []plotter.XY
			for _, p := range run.Points {
				if tp, ok := p.Tasks[t]; ok && p.Kind == "eval" {
					xy = append(xy, plotter.XY{X: p.Seconds, Y: tp.Success})
				}
			}
			if len(xy) == 0 {
				continue
			}
			if _, seen := byMethod[m]; !seen {
				methods = append(methods, m)
			}
			byMethod[m] = append(byMethod[m], xy)
		}
		for _, m := range methods {
			seeds := byMethod[m]
			var avg plotter.XYs
			for k := 0; ; k++ {
				var sx, sy float64
				n := 0
				for _, s := range seeds {
					if k < len(s) {
						sx, sy, n = sx+s[k].X, sy+s[k].Y, n+1
					}
				}
				if n == 0 || 2*n < len(seeds) {
					break
				}
				avg = append(avg, plotter.XY{X: sx / float64(n), Y: sy / float64(n)})
			}
			out[t] = append(out[t], Curve{Method: m, XY: avg})
		}
	}
	return out
}

// Plot writes one panel per family: held-out success against seconds of training, a line per method.
func Plot(path string, tasks []string, runs []Run) error {
	curves := Curves(tasks, runs)
	var panels []*plot.Plot
	colour := map[string]int{}
	lines := 0
	for _, t := range tasks {
		p := plot.New()
		p.Title.Text = t
		p.X.Label.Text = "seconds of training"
		p.Y.Label.Text = "held-out success"
		p.Y.Min, p.Y.Max = 0, 1
		for _, c := range curves[t] {
			if _, ok := colour[c.Method]; !ok {
				colour[c.Method] = len(colour)
			}
			l, s, err := plotter.NewLinePoints(c.XY)
			if err != nil {
				return fmt.Errorf("%s %s: %w", t, c.Method, err)
			}
			l.Color, s.Color = plotutil.Color(colour[c.Method]), plotutil.Color(colour[c.Method])
			l.Dashes = plotutil.Dashes(colour[c.Method])
			s.Shape = draw.CircleGlyph{}
			s.Radius = vg.Points(2)
			p.Add(l, s)
			lines++
			label := labels[c.Method]
			if label == "" {
				label = c.Method
			}
			p.Legend.Add(label, l, s)
		}
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.YPosition = draw.PosBottom
		panels = append(panels, p)
	}
	if lines == 0 {
		return fmt.Errorf("no held-out evaluations to plot")
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(12*vg.Inch, vg.Length(rows)*4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ReadRun reads a run's summary.json and metrics.jsonl.
func ReadRun(dir, method string) (Run, error) {
	s, err := runout.ReadSummary(dir)
	if err != nil {
		return Run{}, err
	}
	pts, err := runout.ReadMetrics(dir)
	if err != nil {
		return Run{}, err
	}
	return Run{Method: method, Seed: s.Seed, Summary: s, Points: pts}, nil
}
