package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// Patcher applies a strategic merge patch to the named object of the controller's
// namespace (e.g. client.CoreV1().Pods(ns).Patch with types.StrategicMergePatchType).
type Patcher func(ctx context.Context, name string, patch []byte) error

// Manager claims objects of type T for one controller object.
type Manager[T metav1.Object] struct {
	// Controller is the owner (a ReplicaSet, a Deployment), as cached.
	Controller metav1.Object
	// Kind is the owner's group, version and kind, written into ownerReferences.
	Kind schema.GroupVersionKind
	// Selector is the owner's label selector.
	Selector labels.Selector
	// Filter, when set, must also accept an object for it to match (upstream's claim
	// filters: a StatefulSet's pods must carry its name with an ordinal).
	Filter func(T) bool
	// Fresh reads the owner from the API server, not the cache. Before its first
	// adoption the manager checks that the owner still exists with the same UID and is
	// not being deleted, so a stale cache never adopts for a deleted owner.
	Fresh func(ctx context.Context) (metav1.Object, error)
	// Patch patches one owned object.
	Patch Patcher
	// Finalizers are added to an object with its adoption and removed with its release
	// (the Job controller's batch.kubernetes.io/job-tracking); none for most owners.
	Finalizers []string

	once     sync.Once
	adoptErr error
}

// Claim returns the objects of objs the controller owns after adopting and releasing as
// needed. Errors of individual adoptions or releases are aggregated; objects that
// vanished meanwhile are skipped silently.
func (m *Manager[T]) Claim(ctx context.Context, objs []T) ([]T, error) {
	var owned []T
	var errs []error
	for _, obj := range objs {
		ok, err := m.claim(ctx, obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			owned = append(owned, obj)
		}
	}
	return owned, utilerrors.NewAggregate(errs)
}

func (m *Manager[T]) claim(ctx context.Context, obj T) (bool, error) {
	matches := m.Selector.Matches(labels.Set(obj.GetLabels())) && (m.Filter == nil || m.Filter(obj))
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		if ref.UID != m.Controller.GetUID() {
			return false, nil // someone else's
		}
		if matches {
			return true, nil
		}
		if m.Controller.GetDeletionTimestamp() != nil {
			return false, nil // the garbage collector deals with it
		}
		return false, ignoreGone(m.release(ctx, obj))
	}
	if !matches || m.Controller.GetDeletionTimestamp() != nil || obj.GetDeletionTimestamp() != nil ||
		obj.GetNamespace() != m.Controller.GetNamespace() {
		return false, nil
	}
	if err := m.adopt(ctx, obj); err != nil {
		return false, ignoreGone(err)
	}
	return true, nil
}

func (m *Manager[T]) adopt(ctx context.Context, obj T) error {
	m.once.Do(func() { m.adoptErr = m.canAdopt(ctx) })
	if m.adoptErr != nil {
		return fmt.Errorf("cannot adopt %s/%s: %w", obj.GetNamespace(), obj.GetName(), m.adoptErr)
	}
	isTrue := true
	patch := map[string]any{"metadata": map[string]any{
		"ownerReferences": []metav1.OwnerReference{{
			APIVersion: m.Kind.GroupVersion().String(), Kind: m.Kind.Kind,
			Name: m.Controller.GetName(), UID: m.Controller.GetUID(),
			Controller: &isTrue, BlockOwnerDeletion: &isTrue,
		}},
		"uid": obj.GetUID(), // precondition: the object we looked at, not a namesake
	}}
	if len(m.Finalizers) > 0 {
		patch["metadata"].(map[string]any)["finalizers"] = m.Finalizers
	}
	return m.patch(ctx, obj, patch)
}

func (m *Manager[T]) release(ctx context.Context, obj T) error {
	patch := map[string]any{"metadata": map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": m.Controller.GetUID()}},
		"uid":             obj.GetUID(),
	}}
	if len(m.Finalizers) > 0 {
		patch["metadata"].(map[string]any)["$deleteFromPrimitiveList/finalizers"] = m.Finalizers
	}
	err := m.patch(ctx, obj, patch)
	if apierrors.IsInvalid(err) {
		return nil // the UID precondition failed: the object was replaced, nothing to release
	}
	return err
}

func (m *Manager[T]) patch(ctx context.Context, obj T, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return m.Patch(ctx, obj.GetName(), b)
}

func (m *Manager[T]) canAdopt(ctx context.Context) error {
	fresh, err := m.Fresh(ctx)
	if err != nil {
		return err
	}
	if fresh.GetUID() != m.Controller.GetUID() {
		return fmt.Errorf("original %s %s/%s is gone: got uid %s, wanted %s", m.Kind.Kind,
			m.Controller.GetNamespace(), m.Controller.GetName(), fresh.GetUID(), m.Controller.GetUID())
	}
	if fresh.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s %s/%s is being deleted", m.Kind.Kind, m.Controller.GetNamespace(), m.Controller.GetName())
	}
	return nil
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
