package replicacalc

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// mi is n MiB as a milli-value.
func mi(n int64) int64 { return n * 1024 * 1024 * 1000 }

func TestGetResourceReplicas(t *testing.T) {
	tests := []struct {
		name       string
		current    int32
		target     int32
		resource   corev1.ResourceName // cpu when empty
		container  string
		tolerances *Tolerances
		pods       []*corev1.Pod
		samples    PodMetricsInfo
		metricsErr error

		want     int32
		wantUtil int32
		wantRaw  int64
		wantErr  string
	}{
		{
			name: "scale up", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 600, "b": 700, "c": 800}),
			want:    5, wantUtil: 70, wantRaw: 700,
		},
		{
			name: "within the tolerance", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 500, "b": 520, "c": 540}),
			want:    3, wantUtil: 52, wantRaw: 520,
		},
		{
			name: "scale down", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 100, "b": 200, "c": 300}),
			want:    2, wantUtil: 20, wantRaw: 200,
		},
		{
			name: "utilization rounds down to whole percent", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 500, "b": 500, "c": 1169}),
			// 2169/3000 = 72.3 % → 72; ratio 1.44, 4.32 → 5.
			want: 5, wantUtil: 72, wantRaw: 723,
		},
		{
			name: "scale up: a never-ready pod's sample is dropped and it counts as using nothing", current: 4, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d", neverReady())},
			samples: samples(map[string]int64{"a": 700, "b": 700, "c": 700, "d": 5000}),
			// ready: 70 % → 1.4 (5 replicas); with d at 0: 2100/4000 = 52 % → within.
			want: 4, wantUtil: 70, wantRaw: 700,
		},
		{
			name: "scale up from ready pods not turned into a scale-down by Pending pods", current: 5, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d", phase(corev1.PodPending)), pod("e", phase(corev1.PodPending))},
			samples: samples(map[string]int64{"a": 600, "b": 600, "c": 600}),
			// ready: 60 % → 1.2 (4 replicas); with d, e at 0: 36 % → 0.72, the other way.
			want: 5, wantUtil: 60, wantRaw: 600,
		},
		{
			name: "scale down: a never-ready pod's sample is left out", current: 4, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d", neverReady())},
			samples: samples(map[string]int64{"a": 400, "b": 400, "c": 400, "d": 3000}),
			want:    3, wantUtil: 40, wantRaw: 400,
		},
		{
			name: "an initializing pod's CPU sample taken within a window of its readiness is left out", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c", started(time.Minute), readiness(corev1.ConditionTrue, 20*time.Second))},
			samples: samples(map[string]int64{"a": 400, "b": 400, "c": 3000}),
			want:    2, wantUtil: 40, wantRaw: 400,
		},
		{
			name: "an initializing pod's CPU sample taken a window after its readiness counts", current: 3, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c", started(time.Minute), readiness(corev1.ConditionTrue, 50*time.Second))},
			samples: samples(map[string]int64{"a": 400, "b": 400, "c": 1000}),
			want:    4, wantUtil: 60, wantRaw: 600,
		},
		{
			name: "memory: readiness does not matter", current: 2, target: 50, resource: corev1.ResourceMemory,
			pods:    []*corev1.Pod{pod("a", neverReady()), pod("b", noReadyCondition())},
			samples: samples(map[string]int64{"a": mi(800), "b": mi(800)}),
			// 1600Mi of 2Gi: 78 % → 1.56, 3.12 → 4.
			want: 4, wantUtil: 78, wantRaw: mi(800),
		},
		{
			name: "Failed pods and pods being deleted are ignored", current: 2, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c", phase(corev1.PodFailed)), pod("d", deleting())},
			samples: samples(map[string]int64{"a": 900, "b": 900, "c": 0, "d": 0}),
			want:    4, wantUtil: 90, wantRaw: 900,
		},
		{
			name: "scale down: a pod without a sample counts as using its request", current: 4, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 100, "b": 100, "c": 100}),
			// 10 % → 0.2; with d at 100 %: 1300/4000 = 32 % → 0.64, 2.56 → 3.
			want: 3, wantUtil: 10, wantRaw: 100,
		},
		{
			name: "scale down: a pod without a sample counts as using the target above 100 %", current: 4, target: 200,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 200, "b": 200, "c": 200}),
			// d at 200 %: 2600/4000 = 65 % → 0.325, 1.3 → 2.
			want: 2, wantUtil: 20, wantRaw: 200,
		},
		{
			name: "scale up: a pod without a sample counts as using nothing", current: 4, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 900, "b": 900, "c": 900}),
			// d at 0: 2700/4000 = 67 % → 1.34, 5.36 → 6.
			want: 6, wantUtil: 90, wantRaw: 900,
		},
		{
			name: "scale up brought within the tolerance by a pod without a sample", current: 4, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 700, "b": 700, "c": 700}),
			want:    4, wantUtil: 70, wantRaw: 700,
		},
		{
			name: "scale down turned around by a pod without a sample keeps the count", current: 4, target: 50, tolerances: &Tolerances{},
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 400, "b": 400, "c": 400}),
			// 0.8 → 3 without d; with d at 100 %: 55 % → 1.1, a scale-up.
			want: 4, wantUtil: 40, wantRaw: 400,
		},
		{
			name: "a surge pod without a sample does not make a scale-down grow the count", current: 2, target: 100,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 500, "b": 500, "c": 500}),
			// d at 100 %: 2500/4000 = 62 % → 0.62, 2.48 → 3 > 2.
			want: 2, wantUtil: 50, wantRaw: 500,
		},
		{
			name: "samples of pods the selector does not match are skipped", current: 2, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b")},
			samples: samples(map[string]int64{"a": 900, "b": 900, "x": 100}),
			want:    4, wantUtil: 90, wantRaw: 900,
		},
		{
			name: "container: its request and usage only", current: 2, target: 50, container: "sidecar",
			pods:    []*corev1.Pod{pod("a", container("sidecar", "500m")), pod("b", container("sidecar", "500m"))},
			samples: samples(map[string]int64{"a": 400, "b": 400}),
			// 800/1000 = 80 % → 1.6, 3.2 → 4.
			want: 4, wantUtil: 80, wantRaw: 400,
		},
		{
			name: "no sample matches a pod", current: 2, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b")},
			samples: samples(map[string]int64{"x": 100, "y": 100}),
			wantErr: "no metrics returned matched known pods",
		},
		{
			name: "every pod unready", current: 2, target: 50,
			pods:    []*corev1.Pod{pod("a", phase(corev1.PodPending)), pod("b", neverReady())},
			samples: samples(map[string]int64{"b": 100}),
			wantErr: "did not receive metrics for targeted pods (pods might be unready)",
		},
		{
			name: "no pods", current: 2, target: 50,
			samples: samples(map[string]int64{"a": 100}),
			wantErr: "no pods returned by selector while calculating replica count",
		},
		{
			name: "the metrics API fails", current: 2, target: 50,
			pods:       []*corev1.Pod{pod("a")},
			metricsErr: errors.New("no metrics returned from resource metrics API"),
			wantErr:    "unable to get metrics for resource cpu: no metrics returned from resource metrics API",
		},
		{
			name: "a container without the request", current: 2, target: 50,
			pods:    []*corev1.Pod{pod("a"), pod("b", requests(corev1.ResourceCPU, ""))},
			samples: samples(map[string]int64{"a": 100, "b": 100}),
			wantErr: "missing request for cpu in container app of Pod b",
		},
		{
			name: "per-HPA tolerance of 1 % scales what the default keeps", current: 3, target: 50,
			tolerances: &Tolerances{ScaleDown: 0.01, ScaleUp: 0.01},
			pods:       []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples:    samples(map[string]int64{"a": 500, "b": 520, "c": 540}),
			want:       4, wantUtil: 52, wantRaw: 520,
		},
		{
			name: "a scale-up tolerance of 200 % keeps 1.4", current: 3, target: 50,
			tolerances: &Tolerances{ScaleDown: 0.1, ScaleUp: 2},
			pods:       []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples:    samples(map[string]int64{"a": 600, "b": 700, "c": 800}),
			want:       3, wantUtil: 70, wantRaw: 700,
		},
		{
			name: "a scale-down tolerance of 65 % keeps 0.4", current: 3, target: 50,
			tolerances: &Tolerances{ScaleDown: 0.65, ScaleUp: 0},
			pods:       []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples:    samples(map[string]int64{"a": 100, "b": 200, "c": 300}),
			want:       3, wantUtil: 20, wantRaw: 200,
		},
		{
			name: "a scale-down tolerance of 55 % does not keep 0.4", current: 3, target: 50,
			tolerances: &Tolerances{ScaleDown: 0.55, ScaleUp: 0},
			pods:       []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples:    samples(map[string]int64{"a": 100, "b": 200, "c": 300}),
			want:       2, wantUtil: 20, wantRaw: 200,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.resource
			if res == "" {
				res = corev1.ResourceCPU
			}
			tol := defaultTolerances
			if tc.tolerances != nil {
				tol = *tc.tolerances
			}
			m := &stubMetrics{pods: tc.samples, timestamp: t0.Add(-5 * time.Second), err: tc.metricsErr}
			c := newCalculator(t, m, nil, tc.pods...)
			got, util, raw, ts, err := c.GetResourceReplicas(testContext(t), tc.current, tc.target, res, tol, ns, webSelector, tc.container)
			wantAsked := []string{"resource " + string(res) + " " + ns + " app=web container=" + tc.container}
			if !reflect.DeepEqual(m.asked, wantAsked) {
				t.Errorf("asked %q, want %q", m.asked, wantAsked)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if got != tc.want || util != tc.wantUtil || raw != tc.wantRaw {
				t.Errorf("got %d replicas at %d %% (%d), want %d at %d %% (%d)", got, util, raw, tc.want, tc.wantUtil, tc.wantRaw)
			}
			if !ts.Equal(t0.Add(-5 * time.Second)) {
				t.Errorf("timestamp %v, want the metrics' %v", ts, t0.Add(-5*time.Second))
			}
		})
	}
}

func TestGetRawResourceReplicas(t *testing.T) {
	tests := []struct {
		name     string
		current  int32
		resource corev1.ResourceName
		target   int64
		pods     []*corev1.Pod
		samples  PodMetricsInfo
		err      error

		want      int32
		wantUsage int64
		wantErr   string
	}{
		{
			name: "scale up", current: 3, resource: corev1.ResourceCPU, target: 500,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 600, "b": 700, "c": 800}),
			want:    5, wantUsage: 700,
		},
		{
			name: "scale down: a pod without a sample counts as using the target", current: 4, resource: corev1.ResourceCPU, target: 500,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d")},
			samples: samples(map[string]int64{"a": 100, "b": 100, "c": 100}),
			// 0.2; with d at 500: 200 → 0.4, 1.6 → 2.
			want: 2, wantUsage: 100,
		},
		{
			name: "scale up: CPU readiness applies, a never-ready pod counts as using nothing", current: 4, resource: corev1.ResourceCPU, target: 500,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d", neverReady())},
			samples: samples(map[string]int64{"a": 700, "b": 700, "c": 700, "d": 9000}),
			// 1.4; with d at 0: 525 → 1.05, within.
			want: 4, wantUsage: 700,
		},
		{
			name: "memory: readiness does not matter", current: 2, resource: corev1.ResourceMemory, target: mi(256),
			pods:    []*corev1.Pod{pod("a", neverReady()), pod("b")},
			samples: samples(map[string]int64{"a": mi(512), "b": mi(512)}),
			want:    4, wantUsage: mi(512),
		},
		{
			name: "the metrics API fails", current: 2, resource: corev1.ResourceMemory, target: 1,
			pods:    []*corev1.Pod{pod("a")},
			err:     errors.New("boom"),
			wantErr: "unable to get metrics for resource memory: boom",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{pods: tc.samples, timestamp: t0, err: tc.err}
			c := newCalculator(t, m, nil, tc.pods...)
			got, u, ts, err := c.GetRawResourceReplicas(testContext(t), tc.current, tc.target, tc.resource, defaultTolerances, ns, webSelector, "")
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if got != tc.want || u != tc.wantUsage || !ts.Equal(t0) {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (%v)", got, u, ts, tc.want, tc.wantUsage, t0)
			}
		})
	}
}

func TestGetMetricReplicas(t *testing.T) {
	tests := []struct {
		name    string
		current int32
		pods    []*corev1.Pod
		samples PodMetricsInfo
		err     error

		want      int32
		wantUsage int64
		wantErr   string
	}{
		{
			name: "scale up", current: 3,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 2000, "b": 2000, "c": 2000}),
			want:    6, wantUsage: 2000,
		},
		{
			name: "scale down", current: 3,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 100, "b": 200, "c": 300}),
			want:    1, wantUsage: 200,
		},
		{
			name: "within the tolerance", current: 3,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 1000, "b": 1050, "c": 1100}),
			want:    3, wantUsage: 1050,
		},
		{
			name: "readiness does not matter for a custom metric", current: 2,
			pods:    []*corev1.Pod{pod("a", neverReady()), pod("b", noReadyCondition())},
			samples: samples(map[string]int64{"a": 2000, "b": 2000}),
			want:    4, wantUsage: 2000,
		},
		{
			name: "scale up: a Pending pod counts as using nothing", current: 3,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c", phase(corev1.PodPending))},
			samples: samples(map[string]int64{"a": 1500, "b": 1500, "c": 9000}),
			// 1.5; with c at 0: 1000 → 1.0, within.
			want: 3, wantUsage: 1500,
		},
		{
			name: "scale down: a pod without a sample counts as using the target", current: 3,
			pods:    []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			samples: samples(map[string]int64{"a": 200, "b": 200}),
			// 0.2; with c at 1000: 466 → 0.466, 1.4 → 2.
			want: 2, wantUsage: 200,
		},
		{
			name: "the custom metrics API fails", current: 3,
			pods:    []*corev1.Pod{pod("a")},
			err:     errors.New("boom"),
			wantErr: "unable to get metric qps: boom",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{pods: tc.samples, timestamp: t0, err: tc.err}
			c := newCalculator(t, m, nil, tc.pods...)
			got, u, ts, err := c.GetMetricReplicas(tc.current, 1000, "qps", defaultTolerances, ns, webSelector, labels.SelectorFromSet(labels.Set{"verb": "GET"}))
			if want := []string{"pods qps " + ns + " app=web verb=GET"}; !reflect.DeepEqual(m.asked, want) {
				t.Errorf("asked %q, want %q", m.asked, want)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if got != tc.want || u != tc.wantUsage || !ts.Equal(t0) {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (%v)", got, u, ts, tc.want, tc.wantUsage, t0)
			}
		})
	}
}

var deploymentRef = &autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}

func TestGetObjectMetricReplicas(t *testing.T) {
	tests := []struct {
		name    string
		current int32
		value   int64
		pods    []*corev1.Pod
		err     error

		want    int32
		wantErr string
	}{
		{
			name: "scale up by the ready pods (Running and Ready)", current: 3, value: 3000,
			pods: []*corev1.Pod{pod("a"), pod("b"), pod("c", readiness(corev1.ConditionFalse, time.Minute)), pod("d", phase(corev1.PodPending))},
			want: 6,
		},
		{
			name: "scale down", current: 3, value: 500,
			pods: []*corev1.Pod{pod("a"), pod("b"), pod("c")},
			want: 2,
		},
		{
			name: "within the tolerance: no pods needed", current: 3, value: 1050,
			want: 3,
		},
		{
			name: "from zero replicas: the ratio rounded up, no pods needed", current: 0, value: 2500,
			want: 3,
		},
		{
			name: "from zero replicas to zero", current: 0, value: 0,
			want: 0,
		},
		{
			name: "a huge value saturates at MaxInt32", current: 3, value: 1 << 50,
			pods: []*corev1.Pod{pod("a"), pod("b")},
			want: math.MaxInt32,
		},
		{
			name: "no pods outside the tolerance", current: 3, value: 3000,
			wantErr: "unable to calculate ready pods: no pods returned by selector while calculating replica count",
		},
		{
			name: "the custom metrics API fails", current: 3,
			err:     errors.New("boom"),
			wantErr: "unable to get metric qps on Deployment team-a/web: boom",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{object: tc.value, timestamp: t0, err: tc.err}
			c := newCalculator(t, m, nil, tc.pods...)
			got, u, ts, err := c.GetObjectMetricReplicas(tc.current, 1000, "qps", defaultTolerances, ns, deploymentRef, webSelector, labels.SelectorFromSet(labels.Set{"verb": "GET"}))
			if want := []string{"object qps " + ns + " Deployment/web verb=GET"}; !reflect.DeepEqual(m.asked, want) {
				t.Errorf("asked %q, want %q", m.asked, want)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			// Upstream drops the object metric's timestamp.
			if got != tc.want || u != tc.value || !ts.IsZero() {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (zero time)", got, u, ts, tc.want, tc.value)
			}
		})
	}
}

func TestGetObjectPerPodMetricReplicas(t *testing.T) {
	tests := []struct {
		name      string
		status    int32
		value     int64
		want      int32
		wantUsage int64
	}{
		{name: "scale up", status: 3, value: 9000, want: 9, wantUsage: 3000},
		{name: "within the tolerance", status: 3, value: 3150, want: 3, wantUsage: 1050},
		{name: "scale down, average rounded up", status: 3, value: 1000, want: 1, wantUsage: 334},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{object: tc.value, timestamp: t0}
			c := newCalculator(t, m, nil)
			got, u, ts, err := c.GetObjectPerPodMetricReplicas(tc.status, 1000, "qps", defaultTolerances, ns, deploymentRef, labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || u != tc.wantUsage || !ts.Equal(t0) {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (%v)", got, u, ts, tc.want, tc.wantUsage, t0)
			}
		})
	}
	t.Run("the custom metrics API fails", func(t *testing.T) {
		c := newCalculator(t, &stubMetrics{err: errors.New("boom")}, nil)
		_, _, _, err := c.GetObjectPerPodMetricReplicas(3, 1000, "qps", defaultTolerances, ns, deploymentRef, labels.Everything())
		if want := "unable to get metric qps on Deployment team-a/web: boom"; err == nil || err.Error() != want {
			t.Fatalf("error %v, want %q", err, want)
		}
	})
}

func TestGetExternalMetricReplicas(t *testing.T) {
	jobs := &metav1.LabelSelector{MatchLabels: map[string]string{"queue": "jobs"}}
	tests := []struct {
		name     string
		current  int32
		selector *metav1.LabelSelector
		values   []int64
		pods     []*corev1.Pod
		err      error

		want      int32
		wantUsage int64
		wantAsked string
		wantErr   string
	}{
		{
			name: "the values summed, times the ready pods", current: 3, selector: jobs,
			values: []int64{1000, 2000},
			pods:   []*corev1.Pod{pod("a"), pod("b"), pod("c", neverReady())},
			want:   6, wantUsage: 3000, wantAsked: "external queue_length team-a queue=jobs",
		},
		{
			name: "no selector selects everything", current: 3,
			values: []int64{1050},
			want:   3, wantUsage: 1050, wantAsked: "external queue_length team-a ",
		},
		{
			name: "from zero replicas", current: 0, selector: jobs,
			values: []int64{1200, 1200},
			want:   3, wantUsage: 2400, wantAsked: "external queue_length team-a queue=jobs",
		},
		{
			name: "the sum saturates at MaxInt64", current: 2, selector: jobs,
			values: []int64{math.MaxInt64 - 5, 10, 10},
			pods:   []*corev1.Pod{pod("a")},
			want:   math.MaxInt32, wantUsage: math.MaxInt64, wantAsked: "external queue_length team-a queue=jobs",
		},
		{
			name: "an invalid selector", current: 3,
			selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "queue", Operator: "Near"}}},
			wantErr:  `"Near" is not a valid label selector operator`,
		},
		{
			name: "the external metrics API fails", current: 3, selector: jobs,
			err:       errors.New("boom"),
			wantAsked: "external queue_length team-a queue=jobs",
			wantErr:   "unable to get external metric team-a/queue_length/&LabelSelector{MatchLabels:map[string]string{queue: jobs,},MatchExpressions:[]LabelSelectorRequirement{},}: boom",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{external: tc.values, timestamp: t0, err: tc.err}
			c := newCalculator(t, m, nil, tc.pods...)
			got, u, ts, err := c.GetExternalMetricReplicas(tc.current, 1000, "queue_length", defaultTolerances, ns, tc.selector, webSelector)
			if tc.wantAsked != "" && !reflect.DeepEqual(m.asked, []string{tc.wantAsked}) {
				t.Errorf("asked %q, want [%q]", m.asked, tc.wantAsked)
			}
			if errorContains(t, err, tc.wantErr) {
				return
			}
			if got != tc.want || u != tc.wantUsage || !ts.IsZero() {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (zero time)", got, u, ts, tc.want, tc.wantUsage)
			}
		})
	}
}

func TestGetExternalPerPodMetricReplicas(t *testing.T) {
	tests := []struct {
		name      string
		status    int32
		target    int64
		values    []int64
		want      int32
		wantUsage int64
	}{
		{name: "scale up", status: 3, target: 1000, values: []int64{3000, 6000}, want: 9, wantUsage: 3000},
		{name: "within the tolerance", status: 3, target: 1000, values: []int64{3150}, want: 3, wantUsage: 1050},
		{name: "scale down", status: 4, target: 1000, values: []int64{500, 500}, want: 1, wantUsage: 250},
		{name: "the proposal saturates at MaxInt32", status: 1, target: 1, values: []int64{1 << 40}, want: math.MaxInt32, wantUsage: 1 << 40},
		{name: "the sum saturates at MaxInt64", status: 2, target: 1 << 62, values: []int64{math.MaxInt64, math.MaxInt64}, want: 2, wantUsage: math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &stubMetrics{external: tc.values, timestamp: t0}
			c := newCalculator(t, m, nil)
			got, u, ts, err := c.GetExternalPerPodMetricReplicas(tc.status, tc.target, "queue_length", defaultTolerances, ns, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || u != tc.wantUsage || !ts.Equal(t0) {
				t.Errorf("got %d replicas at %d (%v), want %d at %d (%v)", got, u, ts, tc.want, tc.wantUsage, t0)
			}
		})
	}
	t.Run("the external metrics API fails", func(t *testing.T) {
		c := newCalculator(t, &stubMetrics{err: errors.New("boom")}, nil)
		_, _, _, err := c.GetExternalPerPodMetricReplicas(3, 1000, "queue_length", defaultTolerances, ns, nil)
		if want := "unable to get external metric team-a/queue_length/nil: boom"; err == nil || err.Error() != want {
			t.Fatalf("error %v, want %q", err, want)
		}
	})
}

func TestTolerancesFor(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	tests := []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		want     Tolerances
	}{
		{name: "no behavior: the flag", want: Tolerances{ScaleDown: 0.2, ScaleUp: 0.2}},
		{name: "behavior without tolerances: the flag", behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{}}, want: Tolerances{ScaleDown: 0.2, ScaleUp: 0.2}},
		{
			name: "scale-up tolerance only",
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{Tolerance: q("0.05")},
			},
			want: Tolerances{ScaleDown: 0.2, ScaleUp: 0.05},
		},
		{
			name: "both",
			behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp:   &autoscalingv2.HPAScalingRules{Tolerance: q("0")},
				ScaleDown: &autoscalingv2.HPAScalingRules{Tolerance: q("500m")},
			},
			want: Tolerances{ScaleDown: 0.5, ScaleUp: 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{Tolerance: 0.2})
			hpa := &autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{Behavior: tc.behavior}}
			if got := c.TolerancesFor(hpa); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got, want := (Tolerances{ScaleDown: 0.05, ScaleUp: 0.125}).String(), "[down:5.0%, up:12.5%]"; got != want {
		t.Errorf("String() %q, want %q", got, want)
	}
}
