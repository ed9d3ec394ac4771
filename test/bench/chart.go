package main

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The chart's size in pixels (gonum/plot renders PNG at 96 dpi).
const chartWidth, chartHeight = 1100, 620

// A metric the chart shows for every workload: the operator's median over
// the built-in controller's, and the workload's target for it.
type metric struct {
	name   string
	color  color.Color
	value  func(ratio) float64
	target func(targets) float64
}

var chartMetrics = []metric{
	{"time to terminal", color.RGBA{66, 133, 244, 255}, func(r ratio) float64 { return r.time }, func(t targets) float64 { return t.Time }},
	{"CPU", color.RGBA{52, 168, 83, 255}, func(r ratio) float64 { return r.cpu }, func(t targets) float64 { return t.CPU }},
	{"peak RSS", color.RGBA{251, 188, 5, 255}, func(r ratio) float64 { return r.rss }, func(t targets) float64 { return t.RSS }},
	{"API requests", color.RGBA{150, 150, 150, 255}, func(r ratio) float64 { return r.req }, func(t targets) float64 { return t.Requests }},
}

var targetColor = color.RGBA{200, 30, 30, 255}

// drawChart draws, per workload, the operator's median over the built-in
// controller's for time, CPU, RSS and requests as grouped bars, each with
// its value above it and its target as a red mark, and the parity line at
// 1.0.
func drawChart(path string, rs []ratio) error {
	p := plot.New()
	p.Title.Text = "indexed-batch-job / built-in Job controller (medians, lower is better, red = target)"
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(8)
	p.Y.Label.Text = "operator / built-in"
	// Room above the highest bar for the legend.
	p.Y.Min, p.Y.Max = 0, 1.5
	for _, r := range rs {
		for _, m := range chartMetrics {
			p.Y.Max = max(p.Y.Max, m.value(r)*1.25)
		}
	}
	p.Y.Tick.Marker = quarterTicks{}
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	p.Legend.Top = true
	p.Legend.Left = true

	if len(rs) == 0 {
		return p.Save(chartWidth*vg.Inch/96, chartHeight*vg.Inch/96, path)
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = chartLabel(r.workload)
	}
	p.NominalX(names...)

	parity, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 1}, {X: float64(len(rs)) - 0.5, Y: 1}})
	if err != nil {
		return err
	}
	parity.Color = color.RGBA{120, 120, 120, 255}
	p.Add(parity)

	barWidth := vg.Length(chartWidth) * 0.6 / vg.Length(len(rs)*len(chartMetrics))
	for j, m := range chartMetrics {
		values := make(plotter.Values, len(rs))
		labels := plotter.XYLabels{XYs: make(plotter.XYs, len(rs)), Labels: make([]string, len(rs))}
		marks := targetMarks{width: barWidth}
		for i, r := range rs {
			values[i] = m.value(r)
			labels.XYs[i] = plotter.XY{X: float64(i), Y: values[i]}
			labels.Labels[i] = fmt.Sprintf("%.2f", values[i])
			if t := m.target(r.targets); t > 0 {
				marks.XYs = append(marks.XYs, plotter.XY{X: float64(i), Y: t})
			}
		}
		offset := (vg.Length(j) - vg.Length(len(chartMetrics)-1)/2) * barWidth
		bars, err := plotter.NewBarChart(values, barWidth*0.9)
		if err != nil {
			return err
		}
		bars.Color, bars.LineStyle.Width, bars.Offset = m.color, 0, offset
		text, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for k := range text.TextStyle {
			text.TextStyle[k].XAlign = draw.XCenter
			text.TextStyle[k].Font.Size = vg.Points(7)
		}
		text.Offset = vg.Point{X: offset, Y: vg.Points(2)}
		marks.offset = offset
		p.Add(bars, text, marks)
		p.Legend.Add(m.name, bars)
	}
	return p.Save(chartWidth*vg.Inch/96, chartHeight*vg.Inch/96, path)
}

// chartLabel fits a workload's name under its bars: backoffLimitPerIndex
// shortened, on two lines after its first word.
func chartLabel(workload string) string {
	name := strings.ReplaceAll(workload, "backoffLimitPerIndex", "BLPI")
	return strings.Replace(name, " ", "\n", 1)
}

// quarterTicks marks the ratio axis every 0.25.
type quarterTicks struct{}

func (quarterTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for v := 0.0; v <= hi+1e-9; v += 0.25 {
		if v >= lo-1e-9 {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%.2f", v)})
		}
	}
	return ticks
}

// targetMarks draws each target as a red dash across its bar: a plotter of
// its own, since a bar's offset within its group is in canvas units, which
// the stock plotters of points do not take.
type targetMarks struct {
	plotter.XYs
	width, offset vg.Length
}

func (t targetMarks) Plot(c draw.Canvas, plt *plot.Plot) {
	x, y := plt.Transforms(&c)
	style := draw.LineStyle{Color: targetColor, Width: vg.Points(2.5)}
	for _, p := range t.XYs {
		mid := x(p.X) + t.offset
		c.StrokeLine2(style, mid-t.width/2, y(p.Y), mid+t.width/2, y(p.Y))
	}
}

// DataRange keeps the targets on the chart.
func (t targetMarks) DataRange() (xmin, xmax, ymin, ymax float64) {
	return plotter.XYRange(t.XYs)
}
