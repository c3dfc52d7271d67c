package daemonset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
)

// hashLabel labels a DaemonSet's revisions and pods with the hash of their template.
const hashLabel = appsv1.DefaultDaemonSetUniqueLabelKey // "controller-revision-hash"

// revisionData is what a DaemonSet's ControllerRevision holds, and what `kubectl rollout
// undo` patches back into the DaemonSet: {"spec":{"template":<template,
// "$patch":"replace">}}, the JSON of the template as the DaemonSet encodes it. A revision
// is the current template's when its data equal these bytes, so they must be upstream's
// bytes exactly (sorted keys; numbers kept as written).
func revisionData(ds *appsv1.DaemonSet) ([]byte, error) {
	raw, err := json.Marshal(ds.Spec.Template)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var template map[string]any
	if err := dec.Decode(&template); err != nil {
		return nil, err
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// matches reports whether rev holds ds's current template.
func matches(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) (bool, error) {
	data, err := revisionData(ds)
	if err != nil {
		return false, err
	}
	return bytes.Equal(data, rev.Data.Raw), nil
}

// constructHistory claims ds's revisions and returns the current template's (created
// when missing, renumbered past the others when an older template is rolled back to) and
// the others. A revision without the hash label gets it (its name), and two revisions of
// the current template are merged into the newest.
func (c *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet) (cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, err error) {
	revs, err := c.claimRevisions(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	var current []*appsv1.ControllerRevision
	for _, rev := range revs {
		if _, ok := rev.Labels[hashLabel]; !ok {
			toUpdate := rev.DeepCopy()
			if toUpdate.Labels == nil {
				toUpdate.Labels = map[string]string{}
			}
			toUpdate.Labels[hashLabel] = toUpdate.Name
			if rev, err = c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
				return nil, nil, err
			}
		}
		ok, err := matches(ds, rev)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			current = append(current, rev)
		} else {
			old = append(old, rev)
		}
	}
	next := maxRevision(old) + 1
	if len(current) == 0 {
		cur, err = c.snapshot(ctx, ds, next)
		if err != nil {
			return nil, nil, err
		}
		return cur, old, nil
	}
	if cur, err = c.dedupCurrent(ctx, ds, current); err != nil {
		return nil, nil, err
	}
	if cur.Revision < next {
		toUpdate := cur.DeepCopy()
		toUpdate.Revision = next
		if _, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, toUpdate, metav1.UpdateOptions{}); err != nil {
			return nil, nil, err
		}
	}
	return cur, old, nil
}

func maxRevision(revs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, r := range revs {
		m = max(m, r.Revision)
	}
	return m
}

// claimRevisions adopts the namespace's orphan revisions ds's selector matches, releases
// its own that it no longer matches, and returns those it owns.
func (c *Controller) claimRevisions(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	// Its own (whatever their labels, to release those it no longer selects) and orphans.
	candidates, err := c.history.List(ds, controllerKind, labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &claim.Manager[*appsv1.ControllerRevision]{
		Controller: ds, Kind: controllerKind, Selector: selector,
		Fresh: c.freshDaemonSet(ds),
		Patch: func(ctx context.Context, name string, patch []byte) error {
			_, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return m.Claim(ctx, candidates)
}

// freshDaemonSet reads ds from the API server for the adoption check: it must still
// exist with its UID.
func (c *Controller) freshDaemonSet(ds *appsv1.DaemonSet) func(ctx context.Context) (metav1.Object, error) {
	return func(ctx context.Context) (metav1.Object, error) {
		fresh, err := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if fresh.UID != ds.UID {
			return nil, fmt.Errorf("original DaemonSet %v/%v is gone: got uid %v, wanted %v", ds.Namespace, ds.Name, fresh.UID, ds.UID)
		}
		return fresh, nil
	}
}

// snapshot creates the revision of ds's current template as number revision, named
// "<daemonset>-<hash>". When the name is taken by another template's revision (a hash
// collision) it bumps status.collisionCount, so the next sync tries another name, and
// fails this one.
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, revision int64) (*appsv1.ControllerRevision, error) {
	data, err := revisionData(ds)
	if err != nil {
		return nil, err
	}
	hash := templatehash.Compute(&ds.Spec.Template, ds.Status.CollisionCount)
	name := ds.Name + "-" + hash
	lbls := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[hashLabel] = hash
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ds.Namespace, Labels: lbls, Annotations: ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
	created, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Create(ctx, rev, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return created, err
	}
	createErr := err
	existing, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if ok, err := matches(ds, existing); err != nil {
		return nil, err
	} else if ok {
		return existing, nil
	}
	fresh, err := c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(fresh.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("found a stale collision count (%d, expected %d) of DaemonSet %q while processing; will retry until it is updated",
			ptrValue(ds.Status.CollisionCount), ptrValue(fresh.Status.CollisionCount), ds.Name)
	}
	var n int32
	if fresh.Status.CollisionCount != nil {
		n = *fresh.Status.CollisionCount
	}
	n++
	fresh.Status.CollisionCount = &n
	if _, err := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("found a hash collision for the DaemonSet; bumped collisionCount to resolve it", "collisionCount", n)
	return nil, createErr
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// dedupCurrent keeps the newest of several revisions of the current template: the pods
// are relabelled with its hash and the others deleted.
func (c *Controller) dedupCurrent(ctx context.Context, ds *appsv1.DaemonSet, current []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if len(current) == 1 {
		return current[0], nil
	}
	var keep *appsv1.ControllerRevision
	for _, r := range current {
		if keep == nil || r.Revision >= keep.Revision {
			keep = r
		}
	}
	pods, err := c.claimPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	hash := keep.Labels[hashLabel]
	for _, pod := range pods {
		if pod.Labels[hashLabel] == hash {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{hashLabel: hash}}})
		if err != nil {
			return nil, err
		}
		if _, err := c.client.CoreV1().Pods(ds.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	for _, r := range current {
		if r.Name == keep.Name {
			continue
		}
		if err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

// cleanupHistory deletes the oldest of old beyond revisionHistoryLimit (default 10) whose
// hash no pod of ds carries, terminal and deleted pods included.
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision) error {
	byNode, err := c.podsByNode(ctx, ds, true)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", ds.Name, err)
	}
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	toKill := len(old) - limit
	if toKill <= 0 {
		return nil
	}
	live := map[string]bool{}
	for _, pods := range byNode {
		for _, p := range pods {
			if h := p.Labels[hashLabel]; h != "" {
				live[h] = true
			}
		}
	}
	sorted := append([]*appsv1.ControllerRevision(nil), old...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Revision < sorted[j].Revision })
	for _, r := range sorted {
		if toKill <= 0 {
			break
		}
		if live[r.Labels[hashLabel]] {
			continue
		}
		if err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		toKill--
	}
	return nil
}
