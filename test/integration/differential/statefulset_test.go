package differential

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The StatefulSet scenario: an OrderedReady set rolled out with a partition, then
// completed and undone with kubectl; a Parallel set from ordinals.start 1 rolled out with
// maxUnavailable 2 and scaled down; an OnDelete set whose pod the test deletes; a set with
// a claim template and the Delete/Delete retention policy (its pods stay Pending: nothing
// binds the claims) scaled down, its scaled-down claim handed to the pod and collected
// with it. Compared: each set's spec.replicas and status (revision names included: the
// revision hash is upstream's), its ControllerRevisions (name, number, hash label, owner),
// its pods (revision, identity labels, hostname, subdomain, claims, owner), the claims
// (labels, owners) and the sets' events with their messages.

func TestDifferentialStatefulSet(t *testing.T) {
	scenario{
		// The garbage collector carries out the retention policy's owner references; the
		// PVC protection controller removes a collected claim's finalizer.
		controllers: []string{"statefulset", "garbagecollector", "pvc-protection"},
		namespaces:  []string{"main"},
		steps:       statefulSetSteps,
		snapshot:    statefulSetSnapshot,
	}.run(t)
}

func statefulSet(name string, replicas int32, opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"sts": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"sts": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}, TerminationGracePeriodSeconds: new(int64)},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *side) patchSet(ctx context.Context, name, patch string) error {
	return mergePatch(ctx, s.f.Client.AppsV1().StatefulSets(s.ns["main"]), name, patch)
}

var statefulSetSteps = []step{
	{name: "StatefulSets created", do: func(ctx context.Context, s *side) error {
		sets := []*appsv1.StatefulSet{
			statefulSet("ordered", 3, func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 1 }),
			statefulSet("parallel", 4, func(s *appsv1.StatefulSet) {
				s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
				s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
			}),
			statefulSet("ondelete", 2, func(s *appsv1.StatefulSet) {
				s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			}),
			statefulSet("claims", 2, func(s *appsv1.StatefulSet) {
				s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
				s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
					WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
				s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
					ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: map[string]string{"tier": "db"}},
					Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
				}}
			}),
		}
		for _, set := range sets {
			if _, err := s.f.Client.AppsV1().StatefulSets(s.ns["main"]).Create(ctx, set, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "new images: ordered with partition 1, parallel with maxUnavailable 2, ondelete", do: func(ctx context.Context, s *side) error {
		if err := s.patchSet(ctx, "ordered", fmt.Sprintf(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}},"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, imageV2)); err != nil {
			return err
		}
		if err := s.patchSet(ctx, "parallel", fmt.Sprintf(`{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":2}},"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, imageV2)); err != nil {
			return err
		}
		return s.patchSet(ctx, "ondelete", fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, imageV2))
	}},
	{name: "partition 0, a pod of ondelete deleted, parallel and claims scaled down", do: func(ctx context.Context, s *side) error {
		if err := s.patchSet(ctx, "ordered", `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`); err != nil {
			return err
		}
		if err := s.kubectl(ctx, "main", "delete", "pod/ondelete-1", "--wait=false"); err != nil {
			return err
		}
		if err := s.kubectl(ctx, "main", "scale", "statefulset/parallel", "--replicas=2"); err != nil {
			return err
		}
		return s.kubectl(ctx, "main", "scale", "statefulset/claims", "--replicas=1")
	}, awaits: []string{"StatefulSet ordered status current=ordered@" + imageV2}},
	{name: "kubectl rollout undo statefulset/ordered", do: func(ctx context.Context, s *side) error {
		return s.kubectl(ctx, "main", "rollout", "undo", "statefulset/ordered")
	}, awaits: []string{"StatefulSet ordered status current=ordered@" + imageV1}},
}

// statefulSetSnapshot reads and normalises the side's StatefulSets, revisions, pods,
// claims and events. Revisions are named as they are (equal hashes are expected) and also
// described by set and image, so a difference says which template it is about.
func statefulSetSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	ns := s.ns["main"]
	sets, err := s.f.Client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	revs, err := s.f.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	pvcs, err := s.f.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	pods, evs, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	norm := newNormaliser(s, nil, nil)
	// revKey describes a revision by its set and the image of its template.
	revKey := map[string]string{}
	for i := range revs.Items {
		r := &revs.Items[i]
		owner := "<none>"
		if ref := metav1.GetControllerOf(r); ref != nil {
			owner = ref.Name
		}
		image := "?"
		if i := strings.Index(string(r.Data.Raw), `"image":"`); i >= 0 {
			rest := string(r.Data.Raw)[i+len(`"image":"`):]
			image = rest[:strings.Index(rest, `"`)]
		}
		key := owner + "@" + image
		revKey[r.Name] = key
		p := "ControllerRevision " + key
		out[p+" name"] = r.Name
		out[p+" revision"] = fmt.Sprint(r.Revision)
		putMap(out, p+" label ", r.Labels, norm)
		putOwners(out, p, r.OwnerReferences, norm.text)
	}
	for i := range sets.Items {
		set := &sets.Items[i]
		p := "StatefulSet " + set.Name
		st := set.Status
		out[p+" spec.replicas"] = ptr(set.Spec.Replicas)
		out[p+" status"] = fmt.Sprintf("observedCurrent=%v replicas=%d ready=%d available=%d current=%d updated=%d collisionCount=%s",
			st.ObservedGeneration >= set.Generation, st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.CurrentReplicas, st.UpdatedReplicas, ptr(st.CollisionCount))
		out[p+" status current="+revKey[st.CurrentRevision]] = st.CurrentRevision
		out[p+" status update="+revKey[st.UpdateRevision]] = st.UpdateRevision
		for _, c := range st.Conditions {
			out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, norm.text(c.Message))
		}
		want := *set.Spec.Replicas
		updated := want
		switch {
		case set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
			updated = -1
		case set.Spec.UpdateStrategy.RollingUpdate != nil && set.Spec.UpdateStrategy.RollingUpdate.Partition != nil:
			updated = max(0, want-*set.Spec.UpdateStrategy.RollingUpdate.Partition)
		}
		ready := want
		if len(set.Spec.VolumeClaimTemplates) > 0 {
			ready = 0 // nothing binds the claims: the pods stay Pending
		}
		switch {
		case st.ObservedGeneration < set.Generation:
			pending = append(pending, p+": generation not observed")
		case st.Replicas != want || st.ReadyReplicas != ready || st.AvailableReplicas != ready:
			pending = append(pending, fmt.Sprintf("%s: %d replicas, %d ready, %d available; want %d, %d", p, st.Replicas, st.ReadyReplicas, st.AvailableReplicas, want, ready))
		case updated >= 0 && st.UpdatedReplicas != updated:
			pending = append(pending, fmt.Sprintf("%s: %d updated, want %d", p, st.UpdatedReplicas, updated))
		}
	}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			pending = append(pending, "pod "+pod.Name+" terminating")
			continue
		}
		p := "Pod " + pod.Name
		out[p+" revision"] = revKey[pod.Labels[appsv1.StatefulSetRevisionLabel]]
		putMap(out, p+" label ", pod.Labels, norm)
		out[p+" identity"] = fmt.Sprintf("hostname=%s subdomain=%s generateName=%s", pod.Spec.Hostname, pod.Spec.Subdomain, pod.GenerateName)
		var claims []string
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				claims = append(claims, v.Name+":"+v.PersistentVolumeClaim.ClaimName)
			}
		}
		sort.Strings(claims)
		out[p+" claims"] = strings.Join(claims, ",")
		putOwners(out, p, pod.OwnerReferences, norm.text)
	}
	for i := range pvcs.Items {
		c := &pvcs.Items[i]
		if c.DeletionTimestamp != nil {
			pending = append(pending, "claim "+c.Name+" being deleted")
			continue
		}
		p := "PersistentVolumeClaim " + c.Name
		putMap(out, p+" label ", c.Labels, norm)
		putOwners(out, p, c.OwnerReferences, norm.text)
	}
	// SuccessfulCreate: the pods' names are compared (the messages), not how often each was
	// created: kwok deletes a pod by name, without a UID precondition, and may play its
	// pod-delete stage twice for one pod; the second delete then hits the pod the
	// controller has just created under the same name, which the controller creates again.
	// Seen on upstream's side (docs/controllers.md).
	// SuccessfulDelete: the pods' names are compared, not how often each was deleted. CI
	// once saw kshard's side record 7 deletes of ordered's pods against upstream's 6, with
	// the same pods named; its logs were gone. One way to it, open to both sides: a sync
	// on a pod cache that has not yet seen the controller's own delete deletes the pod
	// again, and upstream, like kshard, records a pod already gone as deleted. Not
	// reproduced (docs/controllers.md).
	events := eventSet{withMessages: true, presenceOnly: map[string]bool{"SuccessfulCreate": true, "SuccessfulDelete": true}}
	for i := range evs {
		ev := &evs[i]
		if ev.InvolvedObject.Kind != "StatefulSet" {
			continue
		}
		if ev.Reason == "FailedUpdate" && strings.Contains(ev.Message, "the object has been modified") {
			// A claim's owner references written from a cached claim that another
			// controller has written meanwhile: a conflict, retried; which side meets
			// one depends on timing (docs/controllers.md).
			continue
		}
		events.add("StatefulSet "+ev.InvolvedObject.Name, ev, norm.text)
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}
