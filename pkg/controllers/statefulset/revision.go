package statefulset

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/kshard/kshard/pkg/controllers/internal/history"
)

// revisionPatch returns what a StatefulSet revision holds: a strategic merge patch that
// replaces spec.template with the set's, {"spec":{"template":{...,"$patch":"replace"}}}.
// Its bytes name the revision (history.Hash), so they must be upstream's exactly: the
// set's JSON (upstream encodes it with the apps/v1 codec, which is encoding/json of the
// same type), decoded generically and encoded again, which sorts the keys.
func revisionPatch(set *appsv1.StatefulSet) ([]byte, error) {
	data, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	spec, ok := raw["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("statefulset %s/%s has no spec", set.Namespace, set.Name)
	}
	template, ok := spec["template"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("statefulset %s/%s has no template", set.Namespace, set.Name)
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// newRevision returns the revision of the set's current template, numbered revision,
// named with collisionCount as the probe (nil: no probe, for comparisons), carrying the
// set's annotations.
func newRevision(set *appsv1.StatefulSet, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	patch, err := revisionPatch(set)
	if err != nil {
		return nil, err
	}
	cr := history.New(set, controllerKind, set.Spec.Template.Labels, runtime.RawExtension{Raw: patch}, revision, collisionCount)
	cr.Annotations = make(map[string]string, len(set.Annotations))
	for k, v := range set.Annotations {
		cr.Annotations[k] = v
	}
	return cr, nil
}

// applyRevision returns a copy of set whose spec is the revision's patch applied to set's
// spec (the revision's template, everything else the set's).
func applyRevision(set *appsv1.StatefulSet, revision *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	clone := set.DeepCopy()
	original, err := json.Marshal(clone)
	if err != nil {
		return nil, err
	}
	patched, err := strategicpatch.StrategicMergePatch(original, revision.Data.Raw, clone)
	if err != nil {
		return nil, err
	}
	restored := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, restored); err != nil {
		return nil, err
	}
	clone.Spec = restored.Spec
	return clone, nil
}

// latestRevisionMatches reports whether the latest revision, read back into the set and
// written out again, holds the proposed template (upstream's
// StatefulSetSemanticRevisionComparison, on by default): a revision recorded in another
// encoding of the same template (an older kube-controller-manager wrote
// "creationTimestamp":null into the template's metadata) is reused rather than starting a
// rollout. Upstream also applies the API server's defaults to the read-back set, which
// kshard cannot (they live in k8s.io/kubernetes): a revision lacking a field that a newer
// API server defaults does not match here and is replaced by a new revision (see
// docs/controllers.md).
func latestRevisionMatches(set *appsv1.StatefulSet, proposed, latest *appsv1.ControllerRevision) bool {
	latestSet, err := applyRevision(set, latest)
	if err != nil {
		return false
	}
	rebuilt, err := newRevision(latestSet, -1, nil)
	if err != nil {
		return false
	}
	return history.Equal(proposed, rebuilt)
}

// revisions returns the set's current and update revisions and its collision count,
// creating the update revision (or renumbering an equal earlier one, after a rollback)
// as needed. revs must be sorted.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisionCount int32, err error) {
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	update, err = newRevision(set, history.Next(revs), &collisionCount)
	if err != nil {
		return nil, nil, collisionCount, err
	}
	equal := history.FindEqual(revs, update)
	n := len(revs)
	switch {
	case len(equal) > 0 && history.Equal(revs[n-1], equal[len(equal)-1]):
		// The template is the latest revision's: nothing to record.
		update = revs[n-1]
	case len(equal) > 0:
		// Back to an earlier revision's template: it becomes the latest.
		update, err = c.history.UpdateRevision(ctx, equal[len(equal)-1], update.Revision)
		if err != nil {
			return nil, nil, collisionCount, err
		}
	case n > 0 && latestRevisionMatches(set, update, revs[n-1]):
		update = revs[n-1]
	default:
		update, err = c.history.Create(ctx, set, update, &collisionCount)
		if err != nil {
			return nil, nil, collisionCount, err
		}
	}
	for _, r := range revs {
		if r.Name == set.Status.CurrentRevision {
			current = r
			break
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// truncateHistory deletes the oldest revisions beyond revisionHistoryLimit that neither
// the current nor the update revision nor any pod uses. revs must be sorted.
func (c *Controller) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{}
	if current != nil {
		live[current.Name] = true
	}
	if update != nil {
		live[update.Name] = true
	}
	for _, p := range pods {
		live[podRevision(p)] = true
	}
	var old []*appsv1.ControllerRevision
	for _, r := range revs {
		if !live[r.Name] {
			old = append(old, r)
		}
	}
	limit := int(*set.Spec.RevisionHistoryLimit)
	if limit < 0 || len(old) <= limit {
		return nil
	}
	for _, r := range old[:len(old)-limit] {
		if err := c.history.Delete(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// adoptOrphanRevisions adopts the revisions the set's selector matches that nobody
// controls, once the API server confirms the set exists with its UID and is not being
// deleted.
func (c *Controller) adoptOrphanRevisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) error {
	var orphans []*appsv1.ControllerRevision
	for _, r := range revs {
		if metav1.GetControllerOfNoCopy(r) == nil {
			orphans = append(orphans, r)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	if err := c.canAdopt(ctx, set); err != nil {
		return fmt.Errorf("can't adopt ControllerRevisions: %v", err)
	}
	for _, r := range orphans {
		if _, err := c.history.Adopt(ctx, set, controllerKind, r); err != nil {
			return err
		}
	}
	return nil
}

// canAdopt reads the set from the API server: adoption is allowed only while it exists
// with the cached UID and is not being deleted.
func (c *Controller) canAdopt(ctx context.Context, set *appsv1.StatefulSet) error {
	fresh, err := c.fresh(ctx, set)
	if err != nil {
		return err
	}
	if fresh.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%v/%v has just been deleted at %v", set.Namespace, set.Name, fresh.GetDeletionTimestamp())
	}
	return nil
}

func (c *Controller) fresh(ctx context.Context, set *appsv1.StatefulSet) (metav1.Object, error) {
	fresh, err := c.client.AppsV1().StatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if fresh.UID != set.UID {
		return nil, fmt.Errorf("original StatefulSet %v/%v is gone: got uid %v, wanted %v", set.Namespace, set.Name, fresh.UID, set.UID)
	}
	return fresh, nil
}
