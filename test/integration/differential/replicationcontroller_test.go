package differential

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ReplicationController part of the apps scenario: a ReplicationController that adopts
// an orphan, is scaled with kubectl, loses a deleted pod and releases a relabelled one, and
// one beyond the quota namespace's pod quota (ReplicaFailure, FailedCreate).

// rcLabel selects the ReplicationControllers' pods (a key apart from orphanLabel, so the
// ReplicaSet "orphans" and the ReplicationControllers never compete for a pod).
const rcLabel = "kshard.io/e2e-rc"

// rcPod is a bare pod the ReplicationController "web" selects.
func rcPod(name string) *corev1.Pod {
	p := orphanPod(name)
	p.Labels = map[string]string{rcLabel: "web"}
	return p
}

// replicationController has no selector: the API server defaults it from the template's
// labels, as for most ReplicationControllers users write.
func replicationController(name string, replicas int32) *corev1.ReplicationController {
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: &replicas,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{rcLabel: name}},
				Spec:       orphanPod("").Spec,
			},
		},
	}
}

var rcSteps = []step{
	{name: "ReplicationControllers: one adopting an orphan, one beyond the pod quota", do: func(ctx context.Context, s *side) error {
		if _, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Create(ctx, rcPod("rc-orphan"), metav1.CreateOptions{}); err != nil {
			return err
		}
		// As for the ReplicaSet "orphans": the controller must be able to have seen the
		// orphan before the ReplicationController comes.
		err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Get(ctx, "rc-orphan", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
		if err != nil {
			return fmt.Errorf("orphan pod rc-orphan not running: %w", err)
		}
		if _, err := s.f.Client.CoreV1().ReplicationControllers(s.ns["main"]).Create(ctx,
			replicationController("web", 3), metav1.CreateOptions{}); err != nil {
			return err
		}
		// The quota namespace's pods are all taken by the Deployment over-quota.
		_, err = s.f.Client.CoreV1().ReplicationControllers(s.ns["quota"]).Create(ctx,
			replicationController("rc-over-quota", 2), metav1.CreateOptions{})
		return err
	}},
	{name: "kubectl scale rc", do: func(ctx context.Context, s *side) error {
		return s.kubectl(ctx, "main", "scale", "rc/web", "--replicas=4")
	}},
	{name: "a ReplicationController's pod deleted, another relabelled", do: func(ctx context.Context, s *side) error {
		pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: rcLabel + "=web"})
		if err != nil {
			return err
		}
		var owned []string
		for _, p := range pods.Items {
			if metav1.GetControllerOf(&p) != nil && p.DeletionTimestamp == nil {
				owned = append(owned, p.Name)
			}
		}
		if len(owned) < 2 {
			return fmt.Errorf("the ReplicationController web has %d pods, want at least 2", len(owned))
		}
		sort.Strings(owned)
		if err := s.kubectl(ctx, "main", "delete", "pod/"+owned[0], "--wait=false"); err != nil {
			return err
		}
		return s.kubectl(ctx, "main", "label", "pod/"+owned[1], rcLabel+"=released", "--overwrite")
	}},
	{name: "kubectl scale rc down", do: func(ctx context.Context, s *side) error {
		return s.kubectl(ctx, "main", "scale", "rc/web", "--replicas=2")
	}},
}

// putReplicationController records rc's spec.replicas, selector, status and conditions.
func putReplicationController(out flat, p string, rc *corev1.ReplicationController, n normaliser) {
	putMap(out, p+" label ", rc.Labels, n)
	putMap(out, p+" selector ", rc.Spec.Selector, n)
	putOwners(out, p, rc.OwnerReferences, n.text)
	s := rc.Status
	out[p+" spec.replicas"] = ptr(rc.Spec.Replicas)
	out[p+" status"] = fmt.Sprintf("replicas=%d fullyLabeled=%d ready=%d available=%d observedCurrent=%v",
		s.Replicas, s.FullyLabeledReplicas, s.ReadyReplicas, s.AvailableReplicas, s.ObservedGeneration >= rc.Generation)
	for _, c := range s.Conditions {
		out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
	}
}

// rcPending says why rc is not settled: its generation not observed, its pods not all
// available, or (in the quota namespace) no ReplicaFailure condition yet.
func rcPending(p, ns string, rc *corev1.ReplicationController) []string {
	want := int32(1)
	if rc.Spec.Replicas != nil {
		want = *rc.Spec.Replicas
	}
	switch {
	case rc.Status.ObservedGeneration < rc.Generation:
		return []string{p + ": generation not observed"}
	case ns == "quota":
		for _, c := range rc.Status.Conditions {
			if c.Type == corev1.ReplicationControllerReplicaFailure && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return []string{p + ": no ReplicaFailure condition yet"}
	case rc.Status.Replicas != want || rc.Status.AvailableReplicas != want:
		return []string{fmt.Sprintf("%s: %d/%d replicas available", p, rc.Status.AvailableReplicas, want)}
	}
	return nil
}
