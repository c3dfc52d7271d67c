package scaleout

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// capacityPoint is one shard count's sustained rate.
type capacityPoint struct {
	shards int
	rate   float64
}

// plotCapacity draws the capacity curve (sustained changes/s against shards, with the
// linear ideal from one shard) to path, and beside it, to path with "-latency" before
// the extension, the queue-wait p99 against the offered rate, one line per shard count,
// with the SLO; each also as PNG.
func plotCapacity(points []capacityPoint, steps []step, path string) error {
	p := plot.New()
	p.Title.Text = "Sustained Deployment changes/s at queue wait p99 ≤ 1 s, reconcile p99 ≤ 5 s"
	p.X.Label.Text = "shards (each: QPS 20 / burst 30 per controller)"
	p.Y.Label.Text = "changes/s (scale + rollout)"
	var got, ideal plotter.XYs
	for _, c := range points {
		got = append(got, plotter.XY{X: float64(c.shards), Y: c.rate})
		if len(points) > 0 && points[0].shards == 1 {
			ideal = append(ideal, plotter.XY{X: float64(c.shards), Y: points[0].rate * float64(c.shards)})
		}
	}
	if err := plotutil.AddLinePoints(p, "kshard", got); err != nil {
		return err
	}
	if len(ideal) > 0 {
		l, err := plotter.NewLine(ideal)
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		l.Color = color.Gray{Y: 128}
		p.Add(l)
		p.Legend.Add("linear from 1 shard", l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Min, p.Y.Min = 0, 0
	if err := save(p, path); err != nil {
		return err
	}

	q := plot.New()
	q.Title.Text = "Queue wait p99 (worst of deployment, replicaset) by offered rate"
	q.X.Label.Text = "offered changes/s"
	q.Y.Label.Text = "seconds"
	var lines []any
	byShards := map[int]plotter.XYs{}
	var order []int
	for _, s := range steps {
		if _, ok := byShards[s.shards]; !ok {
			order = append(order, s.shards)
		}
		byShards[s.shards] = append(byShards[s.shards], plotter.XY{X: s.rate, Y: s.queueWaitP99})
	}
	for _, n := range order {
		lines = append(lines, fmt.Sprintf("%d shard(s)", n), byShards[n])
	}
	if err := plotutil.AddLinePoints(q, lines...); err != nil {
		return err
	}
	slo := plotter.NewFunction(func(float64) float64 { return queueWaitSLO.Seconds() })
	slo.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	slo.Color = color.RGBA{R: 200, A: 255}
	q.Add(slo)
	q.Legend.Add("SLO", slo)
	q.Legend.Top, q.Legend.Left = true, true
	q.Y.Min = 0
	return save(q, strings.TrimSuffix(path, ".svg")+"-latency.svg")
}

// save writes p as SVG to path and as PNG beside it (for viewers without SVG).
func save(p *plot.Plot, path string) error {
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return err
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, strings.TrimSuffix(path, ".svg")+".png")
}
