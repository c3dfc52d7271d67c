package daemonset

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

func TestShouldRun(t *testing.T) {
	tests := []struct {
		name                  string
		ds                    *appsv1.DaemonSet
		node                  *corev1.Node
		wantRun, wantContinue bool
	}{
		{name: "plain node", ds: newDS("ds"), node: newNode("n"), wantRun: true, wantContinue: true},
		{name: "node selector matches", ds: newDS("ds", withNodeSelector(map[string]string{"role": "edge"})),
			node: newNode("n", nodeLabels(map[string]string{"role": "edge"})), wantRun: true, wantContinue: true},
		{name: "node selector does not match", ds: newDS("ds", withNodeSelector(map[string]string{"role": "edge"})),
			node: newNode("n")},
		{name: "template nodeName elsewhere", ds: newDS("ds", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeName = "other" }),
			node: newNode("n")},
		{name: "template nodeName here", ds: newDS("ds", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeName = "n" }),
			node: newNode("n"), wantRun: true, wantContinue: true},
		{name: "required node affinity does not match", ds: newDS("ds", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
				}}}}}
		}), node: newNode("n", nodeLabels(map[string]string{"zone": "b"}))},
		{name: "untolerated NoSchedule: not placed, but kept", ds: newDS("ds"), node: newNode("n", taint("dedicated", corev1.TaintEffectNoSchedule)),
			wantContinue: true},
		{name: "untolerated NoExecute: neither", ds: newDS("ds"), node: newNode("n", taint("dedicated", corev1.TaintEffectNoExecute))},
		{name: "PreferNoSchedule is ignored", ds: newDS("ds"), node: newNode("n", taint("dedicated", corev1.TaintEffectPreferNoSchedule)),
			wantRun: true, wantContinue: true},
		{name: "tolerated taint", ds: newDS("ds", withTolerations(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists})),
			node: newNode("n", taint("dedicated", corev1.TaintEffectNoExecute)), wantRun: true, wantContinue: true},
		{name: "default toleration: unschedulable", ds: newDS("ds"), node: newNode("n", taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)),
			wantRun: true, wantContinue: true},
		{name: "default toleration: not ready", ds: newDS("ds"), node: newNode("n", taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)),
			wantRun: true, wantContinue: true},
		{name: "network unavailable: only host network tolerates", ds: newDS("ds"),
			node: newNode("n", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), wantContinue: true},
		{name: "network unavailable, host network", ds: newDS("ds", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }),
			node: newNode("n", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), wantRun: true, wantContinue: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, cont := placementOf(tt.ds).shouldRun(klog.Background(), tt.node)
			if run != tt.wantRun || cont != tt.wantContinue {
				t.Errorf("shouldRun = %v, %v; want %v, %v", run, cont, tt.wantRun, tt.wantContinue)
			}
		})
	}
}

func TestAddDaemonTolerations(t *testing.T) {
	defaults := func(extra ...corev1.Toleration) []corev1.Toleration {
		return append(append([]corev1.Toleration(nil), extra...), defaultTolerations...)
	}
	tests := []struct {
		name        string
		in          []corev1.Toleration
		hostNetwork bool
		want        []corev1.Toleration
	}{
		{name: "none", want: defaults()},
		{name: "own toleration kept first", in: []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}},
			want: defaults(corev1.Toleration{Key: "x", Operator: corev1.TolerationOpExists})},
		{name: "a matching toleration is replaced in place, losing its tolerationSeconds (as upstream)",
			in: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			want: defaults()},
		{name: "host network", hostNetwork: true, want: append(defaults(), networkUnavailable)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := corev1.PodSpec{Tolerations: tt.in, HostNetwork: tt.hostNetwork}
			addDaemonTolerations(&spec)
			if !reflect.DeepEqual(tt.want, spec.Tolerations) {
				t.Errorf("tolerations = %+v\nwant %+v", spec.Tolerations, tt.want)
			}
		})
	}
}

func TestPinToNodeAndTargetNode(t *testing.T) {
	pref := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "a", Operator: corev1.NodeSelectorOpExists}}}}}
	pin := []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}
	tests := []struct {
		name string
		in   *corev1.Affinity
		want *corev1.Affinity
	}{
		{name: "no affinity", want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}}},
		{name: "preferred terms kept", in: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: pref}},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: pref,
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}}},
		{name: "required terms replaced", in: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}}},
		{name: "pod affinity kept", in: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}},
			want: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}, NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: pin}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pinToNode(tt.in, "n1")
			if !reflect.DeepEqual(tt.want, got) {
				t.Errorf("affinity = %+v\nwant %+v", got, tt.want)
			}
			pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: got}}
			if n, err := targetNode(pod); err != nil || n != "n1" {
				t.Errorf("targetNode = %q, %v; want n1", n, err)
			}
		})
	}
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}}
	if n, err := targetNode(bound); err != nil || n != "n2" {
		t.Errorf("targetNode of a bound pod = %q, %v; want n2", n, err)
	}
	if _, err := targetNode(&corev1.Pod{}); err == nil {
		t.Error("targetNode of an unpinned, unbound pod: no error")
	}
}
