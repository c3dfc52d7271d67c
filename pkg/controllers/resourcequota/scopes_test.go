package resourcequota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// scopeReq is a scope selector requirement.
func scopeReq(scope corev1.ResourceQuotaScope, op corev1.ScopeSelectorOperator, values ...string) corev1.ScopedResourceSelectorRequirement {
	return corev1.ScopedResourceSelectorRequirement{ScopeName: scope, Operator: op, Values: values}
}

func crossNamespace(p *corev1.Pod) {
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1,
			PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "zone", NamespaceSelector: &metav1.LabelSelector{}}}}}}
}

func sameNamespaceAffinity(p *corev1.Pod) {
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "zone"}}}}
}

func TestPodScopes(t *testing.T) {
	guaranteed := resources(list("cpu", "1", "memory", "1Gi"), list("cpu", "1", "memory", "1Gi"))
	burstable := resources(list("cpu", "1"), nil)
	hard := list("pods", "10")
	pods := []runtime.Object{
		newPod("besteffort"),
		newPod("guaranteed", guaranteed),
		newPod("burstable", burstable, deadline(60)),
		newPod("high", priorityClass("high"), deadline(0)),
		newPod("low", priorityClass("low"), guaranteed),
		newPod("cross", crossNamespace),
		newPod("affine", sameNamespaceAffinity),
	}
	for _, tc := range []usageCase{
		{name: "no scope: every pod", hard: hard, objs: pods, want: list("pods", "7")},
		{name: "Terminating: an active deadline", hard: hard, objs: pods, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeTerminating)},
			want: list("pods", "2")},
		{name: "NotTerminating", hard: hard, objs: pods, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeNotTerminating)},
			want: list("pods", "5")},
		{name: "BestEffort", hard: hard, objs: pods, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeBestEffort)},
			want: list("pods", "4")},
		{name: "NotBestEffort", hard: hard, objs: pods, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeNotBestEffort)},
			want: list("pods", "3")},
		{name: "scopes are ANDed", hard: hard, objs: pods,
			opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeNotTerminating)},
			want: list("pods", "2")},
		{name: "the status's QoS class wins", hard: hard, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeBestEffort)},
			objs: []runtime.Object{newPod("a", guaranteed, func(p *corev1.Pod) { p.Status.QOSClass = corev1.PodQOSBestEffort })},
			want: list("pods", "1")},
		{name: "pod-level resources decide the QoS class", hard: hard, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeNotBestEffort)},
			objs: []runtime.Object{newPod("a", func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu", "1")} })},
			want: list("pods", "1")},
		{name: "BestEffort: an extended resource only is best effort", hard: hard, opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeBestEffort)},
			objs: []runtime.Object{newPod("a", resources(list("example.com/gpu", "1"), list("example.com/gpu", "1")))},
			want: list("pods", "1")},
		{name: "PriorityClass In", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn, "high", "medium"))},
			want: list("pods", "1")},
		{name: "PriorityClass NotIn: pods without a class too", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpNotIn, "high"))},
			want: list("pods", "6")},
		{name: "PriorityClass Exists", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpExists))},
			want: list("pods", "2")},
		{name: "PriorityClass DoesNotExist", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpDoesNotExist))},
			want: list("pods", "5")},
		{name: "CrossNamespacePodAffinity", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopeCrossNamespacePodAffinity, corev1.ScopeSelectorOpExists))},
			want: list("pods", "1")},
		{name: "CrossNamespacePodAffinity: namespaces named", hard: hard,
			opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeCrossNamespacePodAffinity)},
			objs: []runtime.Object{newPod("a", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "zone", Namespaces: []string{"x"}}}}}
			})},
			want: list("pods", "1")},
		{name: "scopes and scope selector are ANDed", hard: hard, objs: pods,
			opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeTerminating),
				selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn, "high"))},
			want: list("pods", "1")},
		{name: "a scope for claims selects no pods", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopeVolumeAttributesClass, corev1.ScopeSelectorOpExists))},
			want: list("pods", "0")},
		// Upstream's quirk (generic.CalculateUsageStats): a scope that cannot be evaluated
		// ends the sum without an error, with what was summed so far (nothing here, as the
		// first pod fails).
		{name: "an invalid scope operator: the partial sum, no error", hard: hard, objs: pods,
			opts: []quotaOpt{selector(scopeReq(corev1.ResourceQuotaScopePriorityClass, "Bogus", "high"))},
			want: list("pods", "0")},
	} {
		t.Run(tc.name, func(t *testing.T) { runUsage(t, tc) })
	}
}

func TestScopeSelector(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     corev1.ScopedResourceSelectorRequirement
		labels  map[string]string
		want    bool
		wantErr string
	}{
		{name: "In", req: scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn, "a"),
			labels: map[string]string{"PriorityClass": "a"}, want: true},
		{name: "NotIn", req: scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpNotIn, "a"),
			labels: map[string]string{"PriorityClass": "a"}},
		{name: "In without values is an error", req: scopeReq(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn),
			wantErr: "for 'in', 'notin' operators, values set can't be empty"},
		{name: "an unknown operator", req: scopeReq(corev1.ResourceQuotaScopePriorityClass, "Bogus"),
			wantErr: `"Bogus" is not a valid scope selector operator`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := scopeSelector(tc.req)
			if tc.wantErr != "" {
				if err == nil || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sel.Matches(labelSet(tc.labels)); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
}
