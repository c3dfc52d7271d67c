package replicaset

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// Reasons of the ReplicaFailure condition (and of the events of the same name).
const (
	ReasonFailedCreate = "FailedCreate"
	ReasonFailedDelete = "FailedDelete"
)

// computeStatus returns rs's status for its active and terminating pods at now, with the
// ReplicaFailure condition set when managing the replicas failed (manageErr) and removed
// once it succeeds. observedGeneration is left as it was: updateStatus sets it.
func computeStatus(rs *appsv1.ReplicaSet, active, terminating []*corev1.Pod, manageErr error, now time.Time) appsv1.ReplicaSetStatus {
	st := *rs.Status.DeepCopy()
	template := labels.SelectorFromValidatedSet(labels.Set(rs.Spec.Template.Labels))
	var fullyLabeled, ready, available int32
	for _, p := range active {
		if template.Matches(labels.Set(p.Labels)) {
			fullyLabeled++
		}
		if podutil.IsReady(p) {
			ready++
			if podutil.IsAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	failure := findCondition(rs.Status.Conditions, appsv1.ReplicaSetReplicaFailure)
	switch {
	case manageErr != nil && failure == nil:
		reason := ""
		if diff := len(active) - int(replicasOf(rs)); diff < 0 {
			reason = ReasonFailedCreate
		} else if diff > 0 {
			reason = ReasonFailedDelete
		}
		st.Conditions = append(withoutCondition(st.Conditions, appsv1.ReplicaSetReplicaFailure), appsv1.ReplicaSetCondition{
			Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: reason,
			Message: manageErr.Error(), LastTransitionTime: metav1.NewTime(now),
		})
	case manageErr == nil && failure != nil:
		st.Conditions = withoutCondition(st.Conditions, appsv1.ReplicaSetReplicaFailure)
	}
	st.Replicas = int32(len(active))
	st.FullyLabeledReplicas = fullyLabeled
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.TerminatingReplicas = ptr.To(int32(len(terminating)))
	return st
}

// replicasOf is spec.replicas, defaulted to 1 as the API server does.
func replicasOf(rs *appsv1.ReplicaSet) int32 {
	return ptr.Deref(rs.Spec.Replicas, 1)
}

func findCondition(conds []appsv1.ReplicaSetCondition, t appsv1.ReplicaSetConditionType) *appsv1.ReplicaSetCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func withoutCondition(conds []appsv1.ReplicaSetCondition, t appsv1.ReplicaSetConditionType) []appsv1.ReplicaSetCondition {
	var out []appsv1.ReplicaSetCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// statusUpToDate reports whether writing st would change nothing: the counts and
// conditions are the same and the current generation has been observed.
func statusUpToDate(rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) bool {
	cur := rs.Status
	return cur.Replicas == st.Replicas && cur.FullyLabeledReplicas == st.FullyLabeledReplicas &&
		cur.ReadyReplicas == st.ReadyReplicas && cur.AvailableReplicas == st.AvailableReplicas &&
		ptr.Equal(cur.TerminatingReplicas, st.TerminatingReplicas) &&
		rs.Generation == cur.ObservedGeneration &&
		apiequality.Semantic.DeepEqual(cur.Conditions, st.Conditions)
}

// updateStatus writes st (with observedGeneration = the generation it was computed for)
// unless nothing changes. A failed update is retried once on a freshly read ReplicaSet, as
// kube-controller-manager does; after that the sync fails and is retried with backoff.
func updateStatus(ctx context.Context, c Client, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	if statusUpToDate(rs, st) {
		return rs, nil
	}
	st.ObservedGeneration = rs.Generation
	const retries = 1
	cur := rs.DeepCopy()
	for i := 0; ; i++ {
		cur.Status = st
		updated, err := c.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if i >= retries {
			return nil, err
		}
		if cur, err = c.Get(ctx, rs.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
}
