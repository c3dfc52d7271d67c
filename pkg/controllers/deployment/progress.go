package deployment

import (
	"context"
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Condition reasons, as upstream sets them (`kubectl rollout status` and users' alerts
// match on them).
const (
	ReasonReplicaSetUpdated     = "ReplicaSetUpdated"
	ReasonReplicaSetCreateError = "ReplicaSetCreateError"
	ReasonNewReplicaSetCreated  = "NewReplicaSetCreated"
	ReasonFoundNewReplicaSet    = "FoundNewReplicaSet"
	ReasonNewReplicaSetReady    = "NewReplicaSetAvailable"
	ReasonProgressDeadline      = "ProgressDeadlineExceeded"
	ReasonPaused                = "DeploymentPaused"
	ReasonResumed               = "DeploymentResumed"
	ReasonMinimumAvailable      = "MinimumReplicasAvailable"
	ReasonMinimumUnavailable    = "MinimumReplicasUnavailable"
)

// newCondition returns a condition that changed now.
func (c *Controller) newCondition(t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, msg string) appsv1.DeploymentCondition {
	now := metav1.NewTime(c.clock.Now())
	return appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: msg,
		LastUpdateTime: now, LastTransitionTime: now}
}

// getCondition returns a copy of the condition of type t, or nil.
func getCondition(s appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			c := s.Conditions[i]
			return &c
		}
	}
	return nil
}

// setCondition sets cond unless a condition with the same status and reason is there (its
// times are then kept); a condition whose status does not change keeps its transition time.
// The new condition goes last.
func setCondition(s *appsv1.DeploymentStatus, cond appsv1.DeploymentCondition) {
	cur := getCondition(*s, cond.Type)
	if cur != nil && cur.Status == cond.Status {
		if cur.Reason == cond.Reason {
			return
		}
		cond.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(s, cond.Type)
	s.Conditions = append(s.Conditions, cond)
}

// removeCondition drops the condition of type t.
func removeCondition(s *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var kept []appsv1.DeploymentCondition
	for _, c := range s.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	s.Conditions = kept
}

// hasProgressDeadline: progressDeadlineSeconds unset or MaxInt32 means no deadline, and
// then no Progressing condition either.
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// complete: every desired replica is updated and available, nothing else runs, and the
// status is about the current generation.
func complete(d *appsv1.Deployment, s *appsv1.DeploymentStatus) bool {
	want := *d.Spec.Replicas
	return s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want &&
		s.ObservedGeneration >= d.Generation
}

// progressing: compared with the Deployment's current status, s has more updated, ready
// or available replicas, or fewer old ones.
func progressing(d *appsv1.Deployment, s *appsv1.DeploymentStatus) bool {
	old := d.Status
	return s.UpdatedReplicas > old.UpdatedReplicas ||
		s.Replicas-s.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		s.ReadyReplicas > old.ReadyReplicas ||
		s.AvailableReplicas > old.AvailableReplicas
}

// timedOut: the Progressing condition of s has not been updated for progressDeadlineSeconds.
func (c *Controller) timedOut(d *appsv1.Deployment, s *appsv1.DeploymentStatus) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	cond := getCondition(*s, appsv1.DeploymentProgressing)
	switch {
	case cond == nil, cond.Reason == ReasonNewReplicaSetReady:
		return false
	case cond.Reason == ReasonProgressDeadline:
		return true
	}
	deadline := cond.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second)
	return deadline.Before(c.clock.Now())
}

// syncRolloutStatus writes the status of a rollout: counts, Available, and Progressing
// (complete, progressing or past its deadline), plus the ReplicaFailure condition of the
// ReplicaSets. When nothing changed, a rollout still in progress is requeued for its
// deadline.
func (c *Controller) syncRolloutStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	s := c.calculateStatus(all, newRS, d)
	if !hasProgressDeadline(d) {
		removeCondition(&s, appsv1.DeploymentProgressing)
	}
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	alreadyComplete := s.Replicas == s.UpdatedReplicas && cur != nil && cur.Reason == ReasonNewReplicaSetReady
	if hasProgressDeadline(d) && !alreadyComplete {
		subject := fmt.Sprintf("Deployment %q", d.Name)
		if newRS != nil {
			subject = fmt.Sprintf("ReplicaSet %q", newRS.Name)
		}
		switch {
		case complete(d, &s):
			setCondition(&s, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewReplicaSetReady,
				subject+" has successfully progressed."))
		case progressing(d, &s):
			// Progress renews lastUpdateTime (the deadline counts from there), so the
			// condition is replaced even when its reason is unchanged.
			cond := c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonReplicaSetUpdated, subject+" is progressing.")
			if cur != nil {
				if cur.Status == corev1.ConditionTrue {
					cond.LastTransitionTime = cur.LastTransitionTime
				}
				removeCondition(&s, appsv1.DeploymentProgressing)
			}
			setCondition(&s, cond)
		case c.timedOut(d, &s):
			setCondition(&s, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonProgressDeadline,
				subject+" has timed out progressing."))
		}
	}
	if failure := replicaFailure(all, newRS); failure != nil {
		setCondition(&s, *failure)
	} else {
		removeCondition(&s, appsv1.DeploymentReplicaFailure)
	}
	if apiequality.Semantic.DeepEqual(d.Status, s) {
		c.requeueForDeadline(ctx, d, s)
		return nil
	}
	d.Status = s
	return c.updateStatus(ctx, d)
}

// replicaFailure returns the first ReplicaFailure condition of the new ReplicaSet, else of
// any ReplicaSet, as a Deployment condition.
func replicaFailure(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) *appsv1.DeploymentCondition {
	for _, rss := range [][]*appsv1.ReplicaSet{{newRS}, all} {
		for _, rs := range rss {
			if rs == nil {
				continue
			}
			for _, rc := range rs.Status.Conditions {
				if rc.Type == appsv1.ReplicaSetReplicaFailure {
					return &appsv1.DeploymentCondition{Type: appsv1.DeploymentConditionType(rc.Type), Status: rc.Status,
						Reason: rc.Reason, Message: rc.Message,
						LastUpdateTime: rc.LastTransitionTime, LastTransitionTime: rc.LastTransitionTime}
				}
			}
		}
	}
	return nil
}

// requeueForDeadline queues a rollout in progress again when its progress deadline
// passes, since nothing else may happen to wake it up then. It returns the delay (-1: not
// queued), for tests.
func (c *Controller) requeueForDeadline(ctx context.Context, d *appsv1.Deployment, s appsv1.DeploymentStatus) time.Duration {
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || cur == nil || complete(d, &s) || cur.Reason == ReasonProgressDeadline {
		return -1
	}
	key := d.Namespace + "/" + d.Name
	after := cur.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Sub(c.clock.Now())
	if after < time.Second {
		klog.FromContext(ctx).V(4).Info("progress deadline reached; checking now")
		c.queue.AddRateLimited(key)
		return 0
	}
	klog.FromContext(ctx).V(4).Info("checking progress at the deadline", "after", after)
	c.queue.AddAfter(key, after+time.Second)
	return after
}
