package runout

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot draws success (top) and mean reward (bottom) per task against episodes trained: training batches
// as lines (smoothed over a few steps), held-out evaluations as points, and writes a PNG.
func Plot(path string, points []Point) error {
	tasks := TaskNames(points)
	success := plot.New()
	success.Title.Text = "Success per task"
	success.X.Label.Text = "episodes trained"
	success.Y.Label.Text = "success"
	success.Y.Min, success.Y.Max = 0, 1
	reward := plot.New()
	reward.Title.Text = "Mean reward per task"
	reward.X.Label.Text = "episodes trained"
	reward.Y.Label.Text = "reward"
	for i, t := range tasks {
		var trS, trR, evS, evR plotter.XYs
		for _, p := range points {
			tp, ok := p.Tasks[t]
			if !ok {
				continue
			}
			xy := func(y float64) plotter.XY { return plotter.XY{X: float64(p.EpisodesTrained), Y: y} }
			if p.Kind == "eval" {
				evS, evR = append(evS, xy(tp.Success)), append(evR, xy(tp.MeanReward))
			} else {
				trS, trR = append(trS, xy(tp.Success)), append(trR, xy(tp.MeanReward))
			}
		}
		for _, pl := range []struct {
			p         *plot.Plot
			train, ev plotter.XYs
		}{{success, smooth(trS, 5), evS}, {reward, smooth(trR, 5), evR}} {
			if len(pl.train) > 0 {
				l, err := plotter.NewLine(pl.train)
				if err != nil {
					return err
				}
				l.Color = plotutil.Color(i)
				pl.p.Add(l)
				pl.p.Legend.Add(t+" (train)", l)
			}
			if len(pl.ev) > 0 {
				s, err := plotter.NewScatter(pl.ev)
				if err != nil {
					return err
				}
				s.Color = plotutil.Color(i)
				s.Shape = draw.CircleGlyph{}
				s.Radius = vg.Points(3)
				pl.p.Add(s)
				pl.p.Legend.Add(t+" (held-out)", s)
			}
		}
	}
	success.Legend.Top, success.Legend.Left = false, false
	success.Legend.YPosition = draw.PosBottom
	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	grid := [][]*plot.Plot{{success}, {reward}}
	canvases := plot.Align(grid, tiles, dc)
	success.Draw(canvases[0][0])
	reward.Draw(canvases[1][0])
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

// smooth is a trailing moving average over k points.
func smooth(xy plotter.XYs, k int) plotter.XYs {
	out := make(plotter.XYs, len(xy))
	sum := 0.0
	for i := range xy {
		sum += xy[i].Y
		if i >= k {
			sum -= xy[i-k].Y
		}
		out[i] = plotter.XY{X: xy[i].X, Y: sum / float64(min(i+1, k))}
	}
	return out
}
