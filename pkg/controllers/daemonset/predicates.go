package daemonset

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// comparisonOperators is kube-controller-manager 1.37's TaintTolerationComparisonOperators
// (alpha, off): tolerations compare taint values for equality only.
const comparisonOperators = false

// defaultTolerations are the tolerations every daemon pod gets (upstream's
// AddOrUpdateDaemonPodTolerations): a daemon keeps running on a node that is not ready or
// unreachable, and is placed on nodes under pressure or cordoned. networkUnavailable is
// added for host-network pods only.
var (
	defaultTolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	networkUnavailable = corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable,
		Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
)

// addDaemonTolerations adds the default tolerations to spec as upstream does: a
// toleration of the spec with the same key, operator, value and effect is replaced by the
// default one (so its tolerationSeconds is dropped), others are kept in order, and a
// default matching none is appended.
func addDaemonTolerations(spec *corev1.PodSpec) {
	add := func(t corev1.Toleration) {
		replaced := false
		out := make([]corev1.Toleration, 0, len(spec.Tolerations)+1)
		for i := range spec.Tolerations {
			if t.MatchToleration(&spec.Tolerations[i]) {
				out = append(out, t)
				replaced = true
				continue
			}
			out = append(out, spec.Tolerations[i])
		}
		if !replaced {
			out = append(out, t)
		}
		spec.Tolerations = out
	}
	for _, t := range defaultTolerations {
		add(t)
	}
	if spec.HostNetwork {
		add(networkUnavailable)
	}
}

// daemonTolerations returns ds's template tolerations with the default ones added.
func daemonTolerations(ds *appsv1.DaemonSet) []corev1.Toleration {
	spec := corev1.PodSpec{Tolerations: ds.Spec.Template.Spec.Tolerations, HostNetwork: ds.Spec.Template.Spec.HostNetwork}
	addDaemonTolerations(&spec)
	return spec.Tolerations
}

// placement is what decides which nodes a DaemonSet's pods belong on, computed once per
// sync.
type placement struct {
	ds          *appsv1.DaemonSet
	tolerations []corev1.Toleration
	affinity    nodeaffinity.RequiredNodeAffinity
}

func placementOf(ds *appsv1.DaemonSet) placement {
	return placement{ds: ds, tolerations: daemonTolerations(ds),
		affinity: nodeaffinity.NewRequiredNodeAffinity(ds.Spec.Template.Spec.NodeSelector, ds.Spec.Template.Spec.Affinity)}
}

// shouldRun reports upstream's two answers for node: whether a daemon pod should be
// placed there (the template's nodeName, its node selector and required node affinity
// match, and every NoSchedule and NoExecute taint is tolerated), and whether a daemon pod
// already there may keep running (placement's answer, except that an untolerated
// NoSchedule taint alone does not evict it).
func (p placement) shouldRun(logger klog.Logger, node *corev1.Node) (shouldRun, shouldContinueRunning bool) {
	if name := p.ds.Spec.Template.Spec.NodeName; name != "" && name != node.Name {
		return false, false
	}
	if fits, _ := p.affinity.Match(node); !fits {
		return false, false
	}
	taints := node.Spec.Taints
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, taints, p.tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, comparisonOperators); !untolerated {
		return true, true
	}
	_, evicting := corev1helpers.FindMatchingUntoleratedTaint(logger, taints, p.tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	}, comparisonOperators)
	return false, !evicting
}

// pinToNode returns affinity with its required node affinity replaced by the single term
// "metadata.name In [node]", as upstream pins a daemon pod to its node (the scheduler
// binds it; spec.nodeName stays empty). Preferred terms and pod (anti-)affinity are kept.
// affinity is modified in place when not nil.
func pinToNode(affinity *corev1.Affinity, node string) *corev1.Affinity {
	pin := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{
			Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}},
	}}}
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	if affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = pin
	} else {
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = pin.NodeSelectorTerms
	}
	return affinity
}

// targetNode returns the node a daemon pod is (spec.nodeName) or will be (its pin) on.
func targetNode(pod *corev1.Pod) (string, error) {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName, nil
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", fmt.Errorf("no spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution for pod %s/%s",
			pod.Namespace, pod.Name)
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return "", fmt.Errorf("no nodeSelectorTerms in requiredDuringSchedulingIgnoredDuringExecution of pod %s/%s",
			pod.Namespace, pod.Name)
	}
	for _, term := range terms {
		for _, req := range term.MatchFields {
			if req.Key == metav1.ObjectNameField && req.Operator == corev1.NodeSelectorOpIn {
				if len(req.Values) != 1 {
					return "", fmt.Errorf("the matchFields value of '%s' is not unique for pod %s/%s",
						metav1.ObjectNameField, pod.Namespace, pod.Name)
				}
				return req.Values[0], nil
			}
		}
	}
	return "", fmt.Errorf("no node name found for pod %s/%s", pod.Namespace, pod.Name)
}
