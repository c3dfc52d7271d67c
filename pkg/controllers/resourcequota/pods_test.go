package resourcequota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/utils/ptr"
)

// usageCase is one quota's usage computed from cached objects.
type usageCase struct {
	name    string
	objs    []runtime.Object
	hard    corev1.ResourceList
	opts    []quotaOpt
	want    corev1.ResourceList
	wantErr bool
}

// runUsage syncs a quota, hard as tc says, over tc's cached objects, and checks the usage
// written.
func runUsage(t *testing.T, tc usageCase) {
	t.Helper()
	q := newQuota("q", tc.hard, tc.opts...)
	f := newFixture(t, []runtime.Object{q}, append([]runtime.Object{q}, tc.objs...)...)
	err := f.Sync("ns/q")
	if (err != nil) != tc.wantErr {
		t.Fatalf("sync error %v, want error %v", err, tc.wantErr)
	}
	got := f.status("q")
	if !quota.Equals(got.Used, tc.want) {
		t.Errorf("used %v, want %v", got.Used, tc.want)
	}
	if !quota.Equals(got.Hard, tc.hard) {
		t.Errorf("status.hard %v, want spec.hard %v", got.Hard, tc.hard)
	}
}

func TestPodUsage(t *testing.T) {
	cpuMem := resources(list("cpu", "100m", "memory", "1Gi"), list("cpu", "200m", "memory", "2Gi"))
	allCompute := list("cpu", "10", "memory", "10Gi", "requests.cpu", "10", "requests.memory", "10Gi",
		"limits.cpu", "10", "limits.memory", "10Gi", "pods", "10", "count/pods", "10")
	for _, tc := range []usageCase{
		{name: "no pods: zero of every resource", hard: allCompute,
			want: list("cpu", "0", "memory", "0", "requests.cpu", "0", "requests.memory", "0",
				"limits.cpu", "0", "limits.memory", "0", "pods", "0", "count/pods", "0")},
		{name: "cpu and memory: bare names are requests", hard: allCompute,
			objs: []runtime.Object{newPod("a", cpuMem)},
			want: list("cpu", "100m", "memory", "1Gi", "requests.cpu", "100m", "requests.memory", "1Gi",
				"limits.cpu", "200m", "limits.memory", "2Gi", "pods", "1", "count/pods", "1")},
		{name: "pods are summed", hard: list("requests.cpu", "10", "pods", "10"),
			objs: []runtime.Object{newPod("a", cpuMem), newPod("b", cpuMem)},
			want: list("requests.cpu", "200m", "pods", "2")},
		{name: "other namespaces do not count", hard: list("requests.cpu", "10", "pods", "10"),
			objs: []runtime.Object{newPod("a", cpuMem), newPod("b", cpuMem, podNamespace("other"))},
			want: list("requests.cpu", "100m", "pods", "1")},
		{name: "ephemeral storage",
			hard: list("ephemeral-storage", "10Gi", "requests.ephemeral-storage", "10Gi", "limits.ephemeral-storage", "10Gi"),
			objs: []runtime.Object{newPod("a", resources(list("ephemeral-storage", "1Gi"), list("ephemeral-storage", "2Gi")))},
			want: list("ephemeral-storage", "1Gi", "requests.ephemeral-storage", "1Gi", "limits.ephemeral-storage", "2Gi")},
		{name: "hugepages, bare and as requests", hard: list("hugepages-2Mi", "1Gi", "requests.hugepages-2Mi", "1Gi"),
			objs: []runtime.Object{newPod("a", resources(list("hugepages-2Mi", "4Mi"), list("hugepages-2Mi", "4Mi")))},
			want: list("hugepages-2Mi", "4Mi", "requests.hugepages-2Mi", "4Mi")},
		{name: "extended resources count by request only", hard: list("requests.example.com/gpu", "4", "limits.example.com/gpu", "4"),
			objs: []runtime.Object{newPod("a", resources(list("example.com/gpu", "2"), list("example.com/gpu", "2")))},
			want: list("requests.example.com/gpu", "2")},
		{name: "a device class's implicit extended resource", hard: list("requests.deviceclass.resource.kubernetes.io/gpu", "4"),
			objs: []runtime.Object{newPod("a", resources(list("deviceclass.resource.kubernetes.io/gpu", "1"), nil))},
			want: list("requests.deviceclass.resource.kubernetes.io/gpu", "1")},
		{name: "terminal pods count in count/pods only", hard: list("requests.cpu", "10", "pods", "10", "count/pods", "10"),
			objs: []runtime.Object{newPod("run", cpuMem), newPod("ok", cpuMem, phase(corev1.PodSucceeded)),
				newPod("ko", cpuMem, phase(corev1.PodFailed))},
			want: list("requests.cpu", "100m", "pods", "1", "count/pods", "3")},
		{name: "a pod past its deletion grace period no longer uses resources", hard: list("requests.cpu", "10", "pods", "10", "count/pods", "10"),
			objs: []runtime.Object{newPod("gone", cpuMem, deletedAt(t0.Add(-time.Minute), 30)),
				newPod("going", cpuMem, deletedAt(t0.Add(-10*time.Second), 30))},
			want: list("requests.cpu", "100m", "pods", "1", "count/pods", "2")},
		{name: "init containers: the largest of an init container and the sum of the others", hard: list("requests.cpu", "10"),
			objs: []runtime.Object{newPod("a", cpuMem, func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: list("cpu", "500m")}}}
			})},
			want: list("requests.cpu", "500m")},
		{name: "sidecars add to the containers", hard: list("requests.cpu", "10"),
			objs: []runtime.Object{newPod("a", cpuMem, func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					Resources: corev1.ResourceRequirements{Requests: list("cpu", "50m")}}}
			})},
			want: list("requests.cpu", "150m")},
		{name: "overhead is added", hard: list("requests.cpu", "10"),
			objs: []runtime.Object{newPod("a", cpuMem, func(p *corev1.Pod) { p.Spec.Overhead = list("cpu", "10m") })},
			want: list("requests.cpu", "110m")},
		{name: "pod-level resources", hard: list("requests.cpu", "10", "limits.memory", "10Gi"),
			objs: []runtime.Object{newPod("a", func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu", "2"), Limits: list("memory", "3Gi")}
			})},
			want: list("requests.cpu", "2", "limits.memory", "3Gi")},
		{name: "a resized pod uses what its status says it was given", hard: list("requests.cpu", "10"),
			objs: []runtime.Object{newPod("a", resources(list("cpu", "1"), nil), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", AllocatedResources: list("cpu", "2"),
					Resources: &corev1.ResourceRequirements{Requests: list("cpu", "2")}}}
			})},
			want: list("requests.cpu", "2")},
		{name: "hard resources no evaluator knows get no usage", hard: list("requests.cpu", "10", "example.com/unknown", "1"),
			objs: []runtime.Object{newPod("a", cpuMem)},
			want: list("requests.cpu", "100m")},
	} {
		t.Run(tc.name, func(t *testing.T) { runUsage(t, tc) })
	}
}

func TestPodUpdateReplenishes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{name: "nothing quota sees changed", old: newPod("a"), cur: newPod("a", func(p *corev1.Pod) { p.Labels = map[string]string{"x": "y"} })},
		{name: "became terminal", old: newPod("a"), cur: newPod("a", phase(corev1.PodSucceeded)), want: true},
		{name: "failed", old: newPod("a"), cur: newPod("a", phase(corev1.PodFailed)), want: true},
		{name: "already terminal", old: newPod("a", phase(corev1.PodFailed)), cur: newPod("a", phase(corev1.PodFailed))},
		{name: "deleted within its grace period", old: newPod("a"), cur: newPod("a", deletedAt(t0, 30))},
		{name: "past its grace period", old: newPod("a"), cur: newPod("a", deletedAt(t0.Add(-time.Minute), 30)), want: true},
		{name: "entered the Terminating scope", old: newPod("a"), cur: newPod("a", deadline(10)), want: true},
		{name: "resized", want: true,
			old: newPod("a", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Resources: &corev1.ResourceRequirements{Requests: list("cpu", "1")}}}
			}),
			cur: newPod("a", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Resources: &corev1.ResourceRequirements{Requests: list("cpu", "2")}}}
			})},
		{name: "an init container resized", want: true,
			old: newPod("a", func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "i", Resources: &corev1.ResourceRequirements{Requests: list("cpu", "1")}}}
			}),
			cur: newPod("a", func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "i", Resources: &corev1.ResourceRequirements{Requests: list("cpu", "2")}}}
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if got := f.ctrl.updateReplenishes(tc.old, tc.cur); got != tc.want {
				t.Errorf("replenishes %v, want %v", got, tc.want)
			}
		})
	}
}
