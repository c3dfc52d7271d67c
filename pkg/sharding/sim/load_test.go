package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

func partitionID(p int) partition.ID { return partition.ID(p) }

// TestLoadModel: the drawn loads are what the scenarios assume (the hot partition
// carries hotShare, only partitions with namespaces carry load), the integral is exact
// across the shift, and costs are balance.Costs of the true loads.
func TestLoadModel(t *testing.T) {
	tests := []struct {
		name   string
		seed   uint64
		p      int
		shards int
	}{
		{name: "48 partitions, 3 shards", seed: 1, p: 48, shards: 3},
		{name: "256 partitions, 8 shards", seed: 2, p: 256, shards: 8},
		{name: "100 partitions, 5 shards", seed: 3, p: 100, shards: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{rng: rand.New(rand.NewPCG(tt.seed, tt.seed)), p: tt.p}
			m := w.newLoadModel(tt.shards)
			sum := 0.0
			for p := range tt.p {
				if m.rate[p] > 0 && m.namespaces[p] == 0 {
					t.Errorf("partition %d carries %.3f without a namespace", p, m.rate[p])
				}
				sum += m.rate[p]
			}
			if math.Abs(sum-m.total) > 1e-9*m.total {
				t.Errorf("loads sum to %.6f, want the total %.6f", sum, m.total)
			}
			if got := m.rate[m.hot] / m.total; math.Abs(got-hotShare) > 1e-9 {
				t.Errorf("hot partition %d carries %.4f of the load, want %.2f", m.hot, got, hotShare)
			}
			if m.shiftTo == m.hot || m.namespaces[m.shiftTo] == 0 {
				t.Errorf("the shift goes to partition %d (hot %d, %d namespaces)", m.shiftTo, m.hot, m.namespaces[m.shiftTo])
			}

			m.shiftAt = 10 * time.Second
			from, to := 4*time.Second, 13*time.Second
			want := m.rate[m.hot]*6 + m.rate[m.shiftTo]*3
			if got := m.integral(m.hot, from, to); math.Abs(got-want) > 1e-9*want {
				t.Errorf("∫ℓ(hot) over [4s, 13s] across the shift at 10s = %.6f, want %.6f", got, want)
			}
			if got := m.hotAt(to); got != m.shiftTo {
				t.Errorf("hot partition after the shift %d, want %d", got, m.shiftTo)
			}

			loads := make([]float32, tt.p)
			for p := range loads {
				loads[p] = float32(m.at(p, to))
			}
			want32 := balance.Costs(loads, m.namespaces)
			for p, c := range m.costs(to) {
				if math.Abs(c-float64(want32[p])) > 1e-4*(1+c) {
					t.Fatalf("cost of partition %d = %.5f, balance.Costs gives %.5f", p, c, want32[p])
				}
			}
		})
	}
}

// TestMeterExactWithoutNoise: a shard's load report (the real loadmeter.EWMA,
// bias-corrected, fed at the shard's clock) gives a partition's constant load exactly,
// from its first report on, whatever the clock's rate, in the runs without noise; the
// liar's report is its loads times its factor.
func TestMeterExactWithoutNoise(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64 // the shard clock's rate
		liar  bool
		times float64 // what the report multiplies the true load by
	}{
		{name: "fast clock", rate: 1 + drift, times: 1},
		{name: "slow clock", rate: 1 - drift, times: 1},
		{name: "exact clock", rate: 1, times: 1},
		{name: "liar ×100", rate: 1 + drift, liar: true, times: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{rng: rand.New(rand.NewPCG(7, 7)), p: 64, opts: Options{NoNoise: true, LiarFactor: tt.times}}
			w.load = w.newLoadModel(3)
			s := &shardNode{clk: clock{offset: time.Minute, rate: tt.rate}, meter: newMeterModel()}
			if tt.liar {
				w.liar = s
			}
			p := w.load.hot
			w.meterAcquired(s, partitionID(p))
			for i := 1; i <= 30; i++ {
				// Heartbeats come every interval of the shard's own clock.
				w.now = s.clk.real(time.Duration(i) * hbInterval)
				r := w.loadReport(s)
				if i == 1 && len(r.Partitions) == 0 {
					continue // its age may fall short of the minimum by a rounding
				}
				if len(r.Partitions) != 1 || int(r.Partitions[0].Partition) != p {
					t.Fatalf("report at %v: %+v, want partition %d alone", w.now, r.Partitions, p)
				}
				want := math.Round(w.load.rate[p] * tt.times * 1000)
				if got := float64(r.Partitions[0].LoadMilli); math.Abs(got-want) > 1 {
					t.Fatalf("report at %v: %.0f milli-requests/s, want %.0f", w.now, got, want)
				}
			}
		})
	}
}
