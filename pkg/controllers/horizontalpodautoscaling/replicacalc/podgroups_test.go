package replicacalc

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestGroupPods(t *testing.T) {
	// A pod started a minute before t0 is within the 5 min CPU initialization period.
	initializing := started(time.Minute)
	tests := []struct {
		name     string
		resource corev1.ResourceName
		pods     []*corev1.Pod
		samples  PodMetricsInfo

		ready                     int
		unready, missing, ignored []string
	}{
		{name: "no pods", resource: corev1.ResourceCPU},
		{
			name: "a ready pod counts", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a")}, samples: samples(map[string]int64{"a": 1}),
			ready: 1,
		},
		{
			name: "CPU: no Ready condition is unready", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", noReadyCondition())}, samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a"},
		},
		{
			name: "CPU: no start time is unready", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", started(-1))}, samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a"},
		},
		{
			name: "memory: neither matters", resource: corev1.ResourceMemory,
			pods:    []*corev1.Pod{pod("a", noReadyCondition()), pod("b", started(-1)), pod("c", neverReady())},
			samples: samples(map[string]int64{"a": 1, "b": 1, "c": 1}),
			ready:   3,
		},
		{
			name: "custom metric (no resource): readiness does not matter", resource: "",
			pods:    []*corev1.Pod{pod("a", noReadyCondition()), pod("b", initializing, readiness(corev1.ConditionFalse, time.Second))},
			samples: samples(map[string]int64{"a": 1, "b": 1}),
			ready:   2,
		},
		{
			name: "CPU, initializing: ready a window before the sample counts", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", initializing, readiness(corev1.ConditionTrue, sampleWindow))}, samples: samples(map[string]int64{"a": 1}),
			ready: 1,
		},
		{
			name: "CPU, initializing: ready less than a window before the sample is unready", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", initializing, readiness(corev1.ConditionTrue, sampleWindow-time.Second))}, samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a"},
		},
		{
			name: "CPU, initializing: not ready is unready however old its sample", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", initializing, readiness(corev1.ConditionFalse, 50*time.Second))}, samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a"},
		},
		{
			name: "CPU, initializing: the sample's own window counts", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", initializing, readiness(corev1.ConditionTrue, 40*time.Second))},
			// A 60 s window ends 20 s after t0-40s: the sample at t0 is 20 s early.
			samples: PodMetricsInfo{"a": {Timestamp: t0, Window: time.Minute, Value: 1}},
			unready: []string{"a"},
		},
		{
			name: "CPU, initialized: ready recently, stale sample, counts", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", readiness(corev1.ConditionTrue, time.Second))}, samples: samples(map[string]int64{"a": 1}),
			ready: 1,
		},
		{
			name: "CPU, initialized: not ready after having been ready counts", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", readiness(corev1.ConditionFalse, time.Minute))}, samples: samples(map[string]int64{"a": 1}),
			ready: 1,
		},
		{
			name: "CPU, initialized: never ready (readiness set within the delay of its start) is unready", resource: corev1.ResourceCPU,
			pods: []*corev1.Pod{pod("a", neverReady())}, samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a"},
		},
		{
			name: "a pod without a sample is missing, whatever its readiness", resource: corev1.ResourceCPU,
			pods:    []*corev1.Pod{pod("a"), pod("b", neverReady())},
			missing: []string{"a", "b"},
		},
		{
			name: "Pending is unready, with or without a sample", resource: "",
			pods:    []*corev1.Pod{pod("a", phase(corev1.PodPending)), pod("b", phase(corev1.PodPending))},
			samples: samples(map[string]int64{"a": 1}),
			unready: []string{"a", "b"},
		},
		{
			name: "being deleted or Failed is ignored, with or without a sample", resource: corev1.ResourceCPU,
			pods:    []*corev1.Pod{pod("a", deleting()), pod("b", phase(corev1.PodFailed)), pod("c", deleting(), phase(corev1.PodPending))},
			samples: samples(map[string]int64{"a": 1}),
			ignored: []string{"a", "b", "c"},
		},
		{
			name: "Succeeded pods count as any other", resource: "",
			pods: []*corev1.Pod{pod("a", phase(corev1.PodSucceeded))}, samples: samples(map[string]int64{"a": 1}),
			ready: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalculator(t, nil, nil)
			m := tc.samples
			if m == nil {
				m = PodMetricsInfo{}
			}
			g := c.groupPods(tc.pods, m, tc.resource)
			if g.ready != tc.ready || !g.unready.Equal(sets.New(tc.unready...)) || !g.missing.Equal(sets.New(tc.missing...)) || !g.ignored.Equal(sets.New(tc.ignored...)) {
				t.Errorf("ready %d unready %v missing %v ignored %v; want %d %v %v %v",
					g.ready, sets.List(g.unready), sets.List(g.missing), sets.List(g.ignored), tc.ready, tc.unready, tc.missing, tc.ignored)
			}
			for name := range m {
				if g.unready.Has(name) || g.ignored.Has(name) {
					t.Errorf("the sample of %s (unready or ignored) was kept", name)
				}
			}
		})
	}
}

func TestCalculateRequests(t *testing.T) {
	always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever
	podLevel := func(cpu string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
		}
	}
	initContainer := func(name, cpu string, restart *corev1.ContainerRestartPolicy) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
				Name: name, RestartPolicy: restart,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
			})
		}
	}
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		container string
		resource  corev1.ResourceName // cpu when empty
		want      map[string]int64
		wantErr   string
	}{
		{name: "no pods", want: map[string]int64{}},
		{
			name: "containers summed",
			pods: []*corev1.Pod{pod("a", container("sidecar", "250m")), pod("b")},
			want: map[string]int64{"a": 1250, "b": 1000},
		},
		{
			name: "restartable init containers (sidecars) count, others do not",
			pods: []*corev1.Pod{pod("a", initContainer("proxy", "100m", &always), initContainer("setup", "2", nil), initContainer("migrate", "3", &never))},
			want: map[string]int64{"a": 1100},
		},
		{
			name: "pod-level requests replace the containers'",
			pods: []*corev1.Pod{pod("a", podLevel("3")), pod("b")},
			want: map[string]int64{"a": 3000, "b": 1000},
		},
		{
			name: "pod-level requests stand in for a container without one",
			pods: []*corev1.Pod{pod("a", requests(corev1.ResourceCPU, ""), podLevel("2"))},
			want: map[string]int64{"a": 2000},
		},
		{
			name:     "pod-level requests without the resource, nor the containers: missing",
			pods:     []*corev1.Pod{pod("a", requests(corev1.ResourceMemory, ""), podLevel("2"))},
			resource: corev1.ResourceMemory,
			wantErr:  "missing pod-level request for memory in Pod a",
		},
		{
			name:     "pod-level requests without the resource: the containers'",
			pods:     []*corev1.Pod{pod("a", podLevel("2"))},
			resource: corev1.ResourceMemory,
			want:     map[string]int64{"a": mi(1024)},
		},
		{
			name:    "a container without the request",
			pods:    []*corev1.Pod{pod("a", container("sidecar", "250m"), requests(corev1.ResourceCPU, ""))},
			wantErr: "missing request for cpu in container app of Pod a",
		},
		{
			name:      "a named container's request only, pod-level requests ignored",
			pods:      []*corev1.Pod{pod("a", container("sidecar", "250m"), podLevel("3"))},
			container: "sidecar",
			want:      map[string]int64{"a": 250},
		},
		{
			name:      "a named container's request only, another container's missing request does not matter",
			pods:      []*corev1.Pod{pod("a", requests(corev1.ResourceCPU, ""), container("sidecar", "250m"))},
			container: "sidecar",
			want:      map[string]int64{"a": 250},
		},
		{
			name:      "a named sidecar",
			pods:      []*corev1.Pod{pod("a", initContainer("proxy", "100m", &always))},
			container: "proxy",
			want:      map[string]int64{"a": 100},
		},
		{
			name:      "a pod without the named container",
			pods:      []*corev1.Pod{pod("a", container("sidecar", "250m")), pod("b")},
			container: "sidecar",
			wantErr:   "container sidecar not found in Pod b",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.resource
			if res == "" {
				res = corev1.ResourceCPU
			}
			got, err := calculateRequests(tc.pods, tc.container, res)
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
