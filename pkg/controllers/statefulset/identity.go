package statefulset

import (
	"regexp"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podNameRE splits a StatefulSet pod's name "<set>-<ordinal>".
var podNameRE = regexp.MustCompile("(.*)-([0-9]+)$")

// parentAndOrdinal returns the StatefulSet name and ordinal a pod's name carries, or ""
// and -1 for a name of another form (and -1 for an ordinal beyond int32).
func parentAndOrdinal(pod *corev1.Pod) (string, int) {
	m := podNameRE.FindStringSubmatch(pod.Name)
	if len(m) < 3 {
		return "", -1
	}
	ordinal := -1
	if i, err := strconv.ParseInt(m[2], 10, 32); err == nil {
		ordinal = int(i)
	}
	return m[1], ordinal
}

// ordinalOf returns the pod's ordinal, -1 when its name has none.
func ordinalOf(pod *corev1.Pod) int {
	_, o := parentAndOrdinal(pod)
	return o
}

// startOrdinal is spec.ordinals.start, 0 without it.
func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

// endOrdinal is the last ordinal the set wants (inclusive).
func endOrdinal(set *appsv1.StatefulSet) int {
	return startOrdinal(set) + int(*set.Spec.Replicas) - 1
}

// inOrdinalRange reports whether the set wants a pod of the pod's ordinal.
func inOrdinalRange(pod *corev1.Pod, set *appsv1.StatefulSet) bool {
	o := ordinalOf(pod)
	return o >= startOrdinal(set) && o <= endOrdinal(set)
}

// podName is "<set>-<ordinal>".
func podName(set *appsv1.StatefulSet, ordinal int) string {
	return set.Name + "-" + strconv.Itoa(ordinal)
}

// claimName is the PVC of template for the pod of ordinal: "<template>-<set>-<ordinal>".
func claimName(set *appsv1.StatefulSet, template *corev1.PersistentVolumeClaim, ordinal int) string {
	return template.Name + "-" + set.Name + "-" + strconv.Itoa(ordinal)
}

// isMemberOf reports whether the pod's name makes it one of set's (a claim filter: a pod
// the selector matches but named otherwise is not the set's).
func isMemberOf(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	parent, _ := parentAndOrdinal(pod)
	return parent == set.Name
}

// identityMatches reports whether the pod has the name, namespace and pod-name label of
// a member of set.
func identityMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	parent, ordinal := parentAndOrdinal(pod)
	return ordinal >= 0 && parent == set.Name && pod.Name == podName(set, ordinal) &&
		pod.Namespace == set.Namespace && pod.Labels[appsv1.StatefulSetPodNameLabel] == pod.Name
}

// storageMatches reports whether the pod mounts each of the set's claim templates as the
// claim of its ordinal.
func storageMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	ordinal := ordinalOf(pod)
	if ordinal < 0 {
		return false
	}
	volumes := make(map[string]corev1.Volume, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for i := range set.Spec.VolumeClaimTemplates {
		t := &set.Spec.VolumeClaimTemplates[i]
		v, ok := volumes[t.Name]
		if !ok || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claimName(set, t, ordinal) {
			return false
		}
	}
	return true
}

// claimsFor returns the claims the pod needs, by template name: each template named for
// the pod's ordinal, in the set's namespace, with the selector's matchLabels added to
// the template's labels.
func claimsFor(set *appsv1.StatefulSet, pod *corev1.Pod) map[string]corev1.PersistentVolumeClaim {
	ordinal := ordinalOf(pod)
	out := make(map[string]corev1.PersistentVolumeClaim, len(set.Spec.VolumeClaimTemplates))
	for i := range set.Spec.VolumeClaimTemplates {
		t := &set.Spec.VolumeClaimTemplates[i]
		c := t.DeepCopy()
		c.Name = claimName(set, t, ordinal)
		c.Namespace = set.Namespace
		if c.Labels != nil {
			for k, v := range set.Spec.Selector.MatchLabels {
				c.Labels[k] = v
			}
		} else {
			c.Labels = set.Spec.Selector.MatchLabels
		}
		out[t.Name] = *c
	}
	return out
}

// updateStorage makes the pod mount its claims: a volume per template (replacing a
// volume of the same name), the pod's other volumes kept after them.
func updateStorage(set *appsv1.StatefulSet, pod *corev1.Pod) {
	current := pod.Spec.Volumes
	claims := claimsFor(set, pod)
	volumes := make([]corev1.Volume, 0, len(claims)+len(current))
	for name, c := range claims {
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}})
	}
	for _, v := range current {
		if _, ok := claims[v.Name]; !ok {
			volumes = append(volumes, v)
		}
	}
	pod.Spec.Volumes = volumes
}

// updateIdentity gives the pod its name, namespace, and the pod-name and pod-index
// labels.
func updateIdentity(set *appsv1.StatefulSet, pod *corev1.Pod) {
	ordinal := ordinalOf(pod)
	pod.Name = podName(set, ordinal)
	pod.Namespace = set.Namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
}

// podRevision is the pod's controller-revision-hash label.
func podRevision(pod *corev1.Pod) string {
	return pod.Labels[appsv1.StatefulSetRevisionLabel]
}

func setPodRevision(pod *corev1.Pod, revision string) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.StatefulSetRevisionLabel] = revision
}

// newPod returns the pod of ordinal as set's template makes it: template labels,
// annotations, finalizers and spec, controlled by set, with its identity (name,
// hostname, subdomain = serviceName, labels) and storage. Like upstream's it also carries
// generateName "<set>-" (ignored by the API server since it has a name).
func newPod(set *appsv1.StatefulSet, ordinal int) *corev1.Pod {
	t := set.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    generateNamePrefix(set.Name),
			Labels:          copyMap(t.Labels),
			Annotations:     copyMap(t.Annotations),
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Spec: t.Spec,
	}
	pod.Name = podName(set, ordinal)
	updateIdentity(set, pod)
	// Hostname and subdomain are set only at creation: they are immutable.
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
	updateStorage(set, pod)
	return pod
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// generateNamePrefix is "<name>-", or name when the dash would make it an invalid name.
func generateNamePrefix(name string) string {
	if p := name + "-"; len(apivalidation.NameIsDNSSubdomain(p, true)) == 0 {
		return p
	}
	return name
}

// newVersionedPod returns the pod of ordinal at the revision it should be created at:
// the current revision below the partition (or, without a rollingUpdate block, below
// status.currentReplicas), the update revision otherwise.
func newVersionedPod(currentSet, updateSet *appsv1.StatefulSet, currentRevision, updateRevision string, ordinal int) *corev1.Pod {
	// Upstream's condition, operator precedence included: the partition case applies
	// whatever the strategy type (a set with OnDelete never has a rollingUpdate block,
	// the API server drops it).
	if currentSet.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		(currentSet.Spec.UpdateStrategy.RollingUpdate == nil && ordinal < startOrdinal(currentSet)+int(currentSet.Status.CurrentReplicas)) ||
		(currentSet.Spec.UpdateStrategy.RollingUpdate != nil && ordinal < startOrdinal(currentSet)+int(*currentSet.Spec.UpdateStrategy.RollingUpdate.Partition)) {
		pod := newPod(currentSet, ordinal)
		setPodRevision(pod, currentRevision)
		return pod
	}
	pod := newPod(updateSet, ordinal)
	setPodRevision(pod, updateRevision)
	return pod
}
