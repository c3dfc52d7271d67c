package deployment

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// The annotations the controller keeps on Deployments and ReplicaSets; kubectl reads them
// (`rollout history`, `rollout undo`), so their names and formats are upstream's.
const (
	// RevisionAnnotation is the revision of a ReplicaSet, and on the Deployment the
	// revision of its current ReplicaSet.
	RevisionAnnotation = "deployment.kubernetes.io/revision"
	// RevisionHistoryAnnotation lists, comma separated, the earlier revisions a
	// ReplicaSet had before a rollback made it current again.
	RevisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	// DesiredReplicasAnnotation is the Deployment's spec.replicas when the ReplicaSet was
	// last scaled; a mismatch tells a resize from a rollout.
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	// MaxReplicasAnnotation is spec.replicas+maxSurge at that time, the base of
	// proportional scaling.
	MaxReplicasAnnotation = "deployment.kubernetes.io/max-replicas"
	// maxRevisionHistoryChars bounds the length of RevisionHistoryAnnotation; the oldest
	// entries are dropped first.
	maxRevisionHistoryChars = 2000
)

// notCopied are the Deployment annotations that are not copied to its ReplicaSets (and not
// copied back on a rollback): the controller's own and kubectl apply's bookkeeping.
var notCopied = map[string]bool{
	corev1.LastAppliedConfigAnnotation: true,
	RevisionAnnotation:                 true,
	RevisionHistoryAnnotation:          true,
	DesiredReplicasAnnotation:          true,
	MaxReplicasAnnotation:              true,
	appsv1.DeprecatedRollbackTo:        true,
}

// revision parses the revision annotation of obj; no annotation is revision 0.
func revision(annotations map[string]string) (int64, error) {
	v, ok := annotations[RevisionAnnotation]
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

// maxRevision is the highest revision among rss; unparsable ones are skipped.
func maxRevision(log logr.Logger, rss []*appsv1.ReplicaSet) int64 {
	var top int64
	for _, rs := range rss {
		v, err := revision(rs.Annotations)
		if err != nil {
			log.V(4).Info("skipping a ReplicaSet with an unparsable revision", "replicaSet", klog.KObj(rs), "err", err)
			continue
		}
		top = max(top, v)
	}
	return top
}

// previousRevision is the second highest revision among rss (what `rollout undo` without
// --to-revision means), 0 if there is none.
func previousRevision(log logr.Logger, rss []*appsv1.ReplicaSet) int64 {
	var first, second int64
	for _, rs := range rss {
		v, err := revision(rs.Annotations)
		if err != nil {
			log.V(4).Info("skipping a ReplicaSet with an unparsable revision", "replicaSet", klog.KObj(rs), "err", err)
			continue
		}
		switch {
		case v >= first:
			first, second = v, first
		case v > second:
			second = v
		}
	}
	return second
}

// setDeploymentRevision records revision on the Deployment and says whether it changed.
func setDeploymentRevision(d *appsv1.Deployment, rev string) bool {
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	if d.Annotations[RevisionAnnotation] == rev {
		return false
	}
	d.Annotations[RevisionAnnotation] = rev
	return true
}

// copyAnnotationsToReplicaSet copies the Deployment's annotations (kubernetes.io/change-cause
// among them) onto rs, except the ones in notCopied. Annotations only rs has stay.
func copyAnnotationsToReplicaSet(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	changed := false
	for k, v := range d.Annotations {
		if notCopied[k] {
			continue
		}
		if cur, ok := rs.Annotations[k]; ok && cur == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	return changed
}

// setNewReplicaSetAnnotations brings the annotations of the Deployment's current
// ReplicaSet up to date: the Deployment's own, the revision newRevision if it is higher
// than rs's (an older revision that became current again, by a rollback, goes into the
// revision history), and for a ReplicaSet being created the replica annotations. It says
// whether anything changed.
func setNewReplicaSetAnnotations(log logr.Logger, d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision string, exists bool) bool {
	changed := copyAnnotationsToReplicaSet(d, rs)
	oldRevision, had := rs.Annotations[RevisionAnnotation]
	oldRev, err := strconv.ParseInt(oldRevision, 10, 64)
	if err != nil {
		if oldRevision != "" {
			log.Info("ReplicaSet revision is not an integer; not updating it", "replicaSet", klog.KObj(rs), "revision", oldRevision)
			return false
		}
		oldRev = 0
	}
	newRev, err := strconv.ParseInt(newRevision, 10, 64)
	if err != nil {
		log.Info("new revision is not an integer; not updating it", "replicaSet", klog.KObj(rs), "revision", newRevision)
		return false
	}
	if oldRev < newRev {
		rs.Annotations[RevisionAnnotation] = newRevision
		changed = true
		if had {
			appendRevisionHistory(log, rs, oldRevision)
		}
	}
	if !exists && setReplicasAnnotations(rs, *d.Spec.Replicas, *d.Spec.Replicas+maxSurge(d)) {
		changed = true
	}
	return changed
}

// appendRevisionHistory appends old to rs's revision history, dropping the oldest entries
// to stay within maxRevisionHistoryChars.
func appendRevisionHistory(log logr.Logger, rs *appsv1.ReplicaSet, old string) {
	history := rs.Annotations[RevisionHistoryAnnotation]
	if history == "" {
		rs.Annotations[RevisionHistoryAnnotation] = old
		return
	}
	entries := strings.Split(history, ",")
	length := len(history) + 1 + len(old)
	drop := 0
	for length > maxRevisionHistoryChars && drop < len(entries) {
		length -= len(entries[drop]) + 1
		drop++
	}
	if length > maxRevisionHistoryChars {
		log.Info("revision history is full; not recording the old revision", "replicaSet", klog.KObj(rs), "limit", maxRevisionHistoryChars)
		return
	}
	rs.Annotations[RevisionHistoryAnnotation] = strings.Join(append(entries[drop:], old), ",")
}

// setReplicasAnnotations records the desired and maximum replicas on rs and says whether
// they changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	changed := false
	for k, v := range map[string]string{
		DesiredReplicasAnnotation: strconv.FormatInt(int64(desired), 10),
		MaxReplicasAnnotation:     strconv.FormatInt(int64(maxReplicas), 10),
	} {
		if rs.Annotations[k] != v {
			rs.Annotations[k] = v
			changed = true
		}
	}
	return changed
}

// replicasAnnotationsStale says whether setReplicasAnnotations would change rs.
func replicasAnnotationsStale(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	return rs.Annotations[DesiredReplicasAnnotation] != strconv.FormatInt(int64(desired), 10) ||
		rs.Annotations[MaxReplicasAnnotation] != strconv.FormatInt(int64(maxReplicas), 10)
}

// replicasAnnotation reads a non-negative int32 annotation of rs.
func replicasAnnotation(log logr.Logger, rs *appsv1.ReplicaSet, key string) (int32, bool) {
	s, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err == nil && v > math.MaxInt32 {
		err = fmt.Errorf("%d is larger than %d", v, math.MaxInt32)
	}
	if err != nil {
		log.V(2).Info("ignoring an invalid annotation", "replicaSet", klog.KObj(rs), "annotation", key, "value", s, "err", err)
		return 0, false
	}
	return int32(v), true
}

// setAnnotationsFromReplicaSet replaces the Deployment's copyable annotations by those of
// the ReplicaSet it rolls back to (the change-cause of that revision among them).
func setAnnotationsFromReplicaSet(d *appsv1.Deployment, rs *appsv1.ReplicaSet) {
	kept := map[string]string{}
	for k, v := range d.Annotations {
		if notCopied[k] {
			kept[k] = v
		}
	}
	for k, v := range rs.Annotations {
		if !notCopied[k] {
			kept[k] = v
		}
	}
	d.Annotations = kept
}
