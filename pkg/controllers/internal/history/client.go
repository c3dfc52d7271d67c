package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// ControllerIndex names the ControllerRevision index by controllerRef that
// AddControllerIndex adds: a parent finds its revisions and its namespace's orphans
// without scanning the namespace.
const ControllerIndex = "kshard.io/controllerrevision-controller"

// indexKey is "<namespace>/<kind>/<name>/<uid>" for a controlled revision and
// "<namespace>" for an orphan.
func indexKey(namespace string, ref *metav1.OwnerReference) string {
	if ref == nil {
		return namespace
	}
	return namespace + "/" + ref.Kind + "/" + ref.Name + "/" + string(ref.UID)
}

// AddControllerIndex adds ControllerIndex to a ControllerRevision informer, once (the
// controllers that keep revisions share the shard's informer). Call it before the
// informer starts.
func AddControllerIndex(inf toolscache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[ControllerIndex]; ok {
		return nil
	}
	err := inf.AddIndexers(toolscache.Indexers{ControllerIndex: func(obj any) ([]string, error) {
		rev, ok := obj.(*appsv1.ControllerRevision)
		if !ok {
			return nil, nil
		}
		return []string{indexKey(rev.Namespace, metav1.GetControllerOfNoCopy(rev))}, nil
	}})
	if err != nil {
		if _, ok := inf.GetIndexer().GetIndexers()[ControllerIndex]; ok {
			return nil // added by another controller meanwhile
		}
	}
	return err
}

// History reads revisions from an informer's indexer (with ControllerIndex) and writes
// them through Client.
type History struct {
	Client  kubernetes.Interface
	Indexer toolscache.Indexer
}

// List returns the revisions of parent's namespace that selector matches and that
// parent controls or nobody controls (adoption candidates). They are the cache's: do not
// modify.
func (h *History) List(parent metav1.Object, parentKind schema.GroupVersionKind, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	keys := []string{
		indexKey(parent.GetNamespace(), metav1.NewControllerRef(parent, parentKind)),
		indexKey(parent.GetNamespace(), nil),
	}
	var out []*appsv1.ControllerRevision
	for _, k := range keys {
		objs, err := h.Indexer.ByIndex(ControllerIndex, k)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			rev, ok := o.(*appsv1.ControllerRevision)
			if !ok || !selector.Matches(labels.Set(rev.Labels)) {
				continue
			}
			if ref := metav1.GetControllerOfNoCopy(rev); ref == nil || ref.UID == parent.GetUID() {
				out = append(out, rev)
			}
		}
	}
	return out, nil
}

// Create creates rev in parent's namespace, named from its hash with *collisionCount as
// the probe. When the name is taken by a revision with the same data, that revision is
// returned; when by other data, *collisionCount is incremented and the next name tried,
// as upstream does (the caller writes the count into its status).
func (h *History) Create(ctx context.Context, parent metav1.Object, rev *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	if collisionCount == nil {
		return nil, errors.New("collisionCount should not be nil")
	}
	clone := rev.DeepCopy()
	ns := parent.GetNamespace()
	clone.Namespace = ns
	for {
		clone.Name = Name(parent.GetName(), Hash(rev, collisionCount))
		created, err := h.Client.AppsV1().ControllerRevisions(ns).Create(ctx, clone, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			exists, err := h.Client.AppsV1().ControllerRevisions(ns).Get(ctx, clone.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			if bytes.Equal(exists.Data.Raw, clone.Data.Raw) {
				return exists, nil
			}
			*collisionCount++
			continue
		}
		return created, err
	}
}

// UpdateRevision renumbers rev as newRevision (a template rolled back to an earlier
// revision's takes the next number), retrying conflicts against the cache's copy.
func (h *History) UpdateRevision(ctx context.Context, rev *appsv1.ControllerRevision, newRevision int64) (*appsv1.ControllerRevision, error) {
	clone := rev.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if clone.Revision == newRevision {
			return nil
		}
		clone.Revision = newRevision
		updated, err := h.Client.AppsV1().ControllerRevisions(clone.Namespace).Update(ctx, clone, metav1.UpdateOptions{})
		if err == nil {
			clone = updated
			return nil
		}
		if obj, ok, gerr := h.Indexer.GetByKey(clone.Namespace + "/" + clone.Name); gerr == nil && ok {
			if cached, ok := obj.(*appsv1.ControllerRevision); ok {
				clone = cached.DeepCopy()
			}
		}
		return err
	})
	return clone, err
}

// Delete deletes rev.
func (h *History) Delete(ctx context.Context, rev *appsv1.ControllerRevision) error {
	return h.Client.AppsV1().ControllerRevisions(rev.Namespace).Delete(ctx, rev.Name, metav1.DeleteOptions{})
}

// Adopt makes parent the controller of the orphan rev (a strategic merge patch with
// rev's UID as precondition). A revision controlled by anyone is refused.
func (h *History) Adopt(ctx context.Context, parent metav1.Object, parentKind schema.GroupVersionKind, rev *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if owner := metav1.GetControllerOfNoCopy(rev); owner != nil {
		return nil, fmt.Errorf("attempt to adopt revision owned by %v", owner)
	}
	isTrue := true
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []metav1.OwnerReference{{
			APIVersion: parentKind.GroupVersion().String(), Kind: parentKind.Kind,
			Name: parent.GetName(), UID: parent.GetUID(),
			Controller: &isTrue, BlockOwnerDeletion: &isTrue,
		}},
		"uid": rev.UID,
	}})
	if err != nil {
		return nil, err
	}
	return h.Client.AppsV1().ControllerRevisions(parent.GetNamespace()).Patch(ctx, rev.Name,
		types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}

// Release removes parent's owner reference from rev. A revision gone, or no longer
// parent's (the UID precondition fails as Invalid), is not an error: (nil, nil).
func (h *History) Release(ctx context.Context, parent metav1.Object, rev *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": parent.GetUID()}},
		"uid":             rev.UID,
	}})
	if err != nil {
		return nil, err
	}
	released, err := h.Client.AppsV1().ControllerRevisions(rev.Namespace).Patch(ctx, rev.Name,
		types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return nil, nil
	}
	return released, err
}
