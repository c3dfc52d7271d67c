package scaleout

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		q       float64
		buckets map[float64]float64
		want    float64
	}{
		{name: "empty", q: 0.99, buckets: map[float64]float64{1: 0, inf: 0}, want: 0},
		{name: "all in the first bucket", q: 0.99, buckets: map[float64]float64{1: 100, 2: 100, inf: 100}, want: 0.99},
		{name: "interpolated in the second bucket", q: 0.5, buckets: map[float64]float64{1: 0, 3: 100, inf: 100}, want: 2},
		{name: "in +Inf: the highest finite bound", q: 0.99, buckets: map[float64]float64{1: 10, 5: 50, inf: 100}, want: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.q, tt.buckets); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("quantile = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPlotCapacity(t *testing.T) {
	steps := []step{{shards: 1, rate: 1, drained: true, achieved: 1}, {shards: 1, rate: 2, queueWaitP99: 3}, {shards: 2, rate: 2, drained: true, achieved: 2}}
	path := filepath.Join(t.TempDir(), "capacity.svg")
	if err := plotCapacity([]capacityPoint{{1, 1}, {2, 2}}, steps, path); err != nil {
		t.Fatal(err)
	}
	// Each plot is written as SVG and PNG: check every file is there and begins as its
	// format does.
	svg := [][]byte{[]byte("<?xml"), []byte("<svg")}
	png := [][]byte{[]byte("\x89PNG\r\n\x1a\n")}
	for _, f := range []struct {
		name  string
		magic [][]byte
	}{
		{"capacity.svg", svg}, {"capacity.png", png}, {"capacity-latency.svg", svg}, {"capacity-latency.png", png},
	} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), f.name))
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.ContainsFunc(f.magic, func(m []byte) bool { return bytes.HasPrefix(b, m) }) {
			t.Errorf("%s (%d bytes) begins with %q, want one of %q", f.name, len(b), b[:min(len(b), 16)], f.magic)
		}
	}
}

func TestStepDiagnosis(t *testing.T) {
	tests := []struct {
		name                         string
		s                            step
		perChange, reqShare, nsShare float64
		wait                         float64
	}{
		{name: "no shards", s: step{achieved: 2, window: 60, span: 70}},
		{name: "one shard", s: step{achieved: 2, window: 60, span: 100, perShard: []shardWork{{requests: 600, limitWait: 50, namespaces: 400}}},
			perChange: 5, reqShare: 1, nsShare: 1, wait: 0.5},
		{name: "the busiest of two by requests is not the busiest by namespaces", s: step{achieved: 1, window: 100, span: 200,
			perShard: []shardWork{{requests: 300, limitWait: 20, namespaces: 100}, {requests: 100, limitWait: 60, namespaces: 300}}},
			perChange: 4, reqShare: 0.75, nsShare: 0.75, wait: 0.3},
		{name: "nothing sent", s: step{window: 60, span: 60, perShard: []shardWork{{requests: 10}}}, reqShare: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc, rs, ns, w := tt.s.diagnosis()
			for _, c := range []struct {
				what      string
				got, want float64
			}{{"requests per change", pc, tt.perChange}, {"busiest request share", rs, tt.reqShare}, {"busiest namespace share", ns, tt.nsShare}, {"busiest wait", w, tt.wait}} {
				if math.Abs(c.got-c.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestPlanChanges(t *testing.T) {
	nss := []string{"a", "b"}
	// scale and rollout are changes of a namespace's capacityDeployment.
	scale := func(ns string, r int32) change { return change{namespace: ns, name: capacityDeployment, replicas: r} }
	rollout := func(ns string) change { return change{namespace: ns, name: capacityDeployment} }
	key := func(ns string) string { return deploymentKey(ns, capacityDeployment) }
	tests := []struct {
		name    string
		targets []int
		current map[string]int32
		want    []change
	}{
		{name: "a Deployment at 2 is scaled to 3", targets: []int{0}, current: map[string]int32{key("a"): 2},
			want: []change{scale("a", 3)}},
		{name: "a Deployment already at 3 is scaled to 2, not patched to 3 again", targets: []int{0, 1, 1}, current: map[string]int32{key("b"): 3},
			want: []change{scale("a", 3), rollout("b"), scale("b", 2)}},
		{name: "scale changes toggle within the step, rollouts in between", targets: []int{0, 0, 0, 1, 0}, current: nil,
			want: []change{scale("a", 3), rollout("a"), scale("a", 2), rollout("b"), scale("a", 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planChanges(nss, tt.targets, tt.current)
			if !slices.Equal(got, tt.want) {
				t.Errorf("planChanges = %+v, want %+v", got, tt.want)
			}
			// No scale change sets the size the Deployment already has.
			size := map[string]int32{key("a"): 2, key("b"): 2}
			for k, r := range tt.current {
				size[k] = r
			}
			for i, c := range got {
				if c.replicas == 0 {
					continue
				}
				k := deploymentKey(c.namespace, c.name)
				if c.replicas == size[k] {
					t.Errorf("change %d scales %s to the %d replicas it has", i, k, c.replicas)
				}
				size[k] = c.replicas
			}
		})
	}
}

func TestChangePatch(t *testing.T) {
	tests := []struct {
		name   string
		c      change
		prefix string
	}{
		{name: "a scale sets the replicas", c: change{namespace: "a", name: "app-0", replicas: 3}, prefix: `{"spec":{"replicas":3}}`},
		{name: "a rollout sets the template annotation", c: change{namespace: "a", name: "app-0"},
			prefix: `{"spec":{"template":{"metadata":{"annotations":{"` + revAnnotation + `":"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.c.patch()); !strings.HasPrefix(got, tt.prefix) {
				t.Errorf("patch = %s, want it to begin with %s", got, tt.prefix)
			}
		})
	}
}

func TestKShardConfigs(t *testing.T) {
	tests := []struct {
		name   string
		shards []int
		ps     []string
		want   []config
	}{
		{name: "count only keeps today's names", shards: []int{1, 4}, ps: []string{"count"},
			want: []config{{name: "kshard-1", shards: 1, placement: "count"}, {name: "kshard-4", shards: 4, placement: "count"}}},
		{name: "one shard runs once under the first placement", shards: []int{1, 4}, ps: []string{"load", "count"},
			want: []config{{name: "kshard-1", shards: 1, placement: "load"}, {name: "kshard-4-load", shards: 4, placement: "load"},
				{name: "kshard-4", shards: 4, placement: "count"}}},
		{name: "both placements at two counts", shards: []int{2, 3}, ps: []string{"count", "load"},
			want: []config{{name: "kshard-2", shards: 2, placement: "count"}, {name: "kshard-2-load", shards: 2, placement: "load"},
				{name: "kshard-3", shards: 3, placement: "count"}, {name: "kshard-3-load", shards: 3, placement: "load"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kshardConfigs(tt.shards, tt.ps); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("kshardConfigs(%v, %v) = %+v, want %+v", tt.shards, tt.ps, got, tt.want)
			}
		})
	}
	t.Setenv(coordinatorArgsEnv, "")
	if got := (config{name: "upstream"}).coordinatorArgs(); got != nil {
		t.Errorf("upstream's coordinator args = %v, want none", got)
	}
	if got := (config{placement: "load"}).coordinatorArgs(); !reflect.DeepEqual(got, []string{"--placement=load"}) {
		t.Errorf("load's coordinator args = %v", got)
	}
	t.Setenv(coordinatorArgsEnv, " --balance-interval=10s  --load-report-interval=2s ")
	if got, want := (config{placement: "count"}).coordinatorArgs(), []string{"--placement=count", "--balance-interval=10s", "--load-report-interval=2s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("with %s: coordinator args = %v, want %v", coordinatorArgsEnv, got, want)
	}
}

// TestArrivalTimes: regular arrivals are 1/rate apart; Poisson ones are n sorted times
// within the window whose gaps look exponential (mean 1/rate, coefficient of variation
// near 1), the same for the same seed.
func TestArrivalTimes(t *testing.T) {
	const n, rate = 6000, 100.0
	window := time.Duration(n / rate * float64(time.Second))
	tests := []struct {
		name    string
		poisson bool
		wantCV  [2]float64 // bounds of the gaps' coefficient of variation
	}{
		{name: "regular", wantCV: [2]float64{0, 1e-6}},
		{name: "poisson", poisson: true, wantCV: [2]float64{0.95, 1.05}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := arrivalTimes(n, rate, window, tt.poisson, rand.New(rand.NewPCG(1, 2)))
			if len(at) != n || !slices.IsSorted(at) || at[0] < 0 || at[n-1] >= window {
				t.Fatalf("%d times, sorted %v, first %s, last %s; want %d sorted within [0, %s)", len(at), slices.IsSorted(at), at[0], at[n-1], n, window)
			}
			var sum, sq float64
			for i := 1; i < n; i++ {
				g := (at[i] - at[i-1]).Seconds()
				sum += g
				sq += g * g
			}
			mean := sum / (n - 1)
			cv := math.Sqrt(sq/(n-1)-mean*mean) / mean
			if math.Abs(mean-1/rate) > 0.03/rate || cv < tt.wantCV[0] || cv > tt.wantCV[1] {
				t.Errorf("gaps: mean %.5f s (want %.5f), coefficient of variation %.3f (want %v)", mean, 1/rate, cv, tt.wantCV)
			}
			if again := arrivalTimes(n, rate, window, tt.poisson, rand.New(rand.NewPCG(1, 2))); !slices.Equal(at, again) {
				t.Error("the same seed gave other times")
			}
		})
	}
}
