package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// errNamespacedOwnerOfClusterScoped marks a cluster-scoped object that names a namespaced
// owner: invalid, and no retry fixes it.
var errNamespacedOwnerOfClusterScoped = fmt.Errorf("cluster-scoped objects cannot refer to namespaced owners")

// namespaceFor is the namespace to address an object of a resource in.
func namespaceFor(namespaced bool, namespace string) string {
	if namespaced {
		return namespace
	}
	return ""
}

// getObject reads item live through the metadata client.
func (c *Controller) getObject(ctx context.Context, item objectReference) (*metav1.PartialObjectMetadata, error) {
	gvr, namespaced, err := c.resources.mapping(item.APIVersion, item.Kind)
	if err != nil {
		return nil, err
	}
	if namespaced && item.Namespace == "" {
		// Only a cluster-scoped object names a namespaced owner without a namespace.
		return nil, errNamespacedOwnerOfClusterScoped
	}
	return c.metadata.Resource(gvr).Namespace(namespaceFor(namespaced, item.Namespace)).Get(ctx, item.Name, metav1.GetOptions{})
}

// cachedOrLive reads item from the shard's store of its resource, or live when the store
// does not hold it: the base of a JSON merge patch, as upstream's getMetadata.
func (c *Controller) cachedOrLive(ctx context.Context, item objectReference) (metav1.Object, error) {
	gvr, namespaced, err := c.resources.mapping(item.APIVersion, item.Kind)
	if err != nil {
		return nil, err
	}
	ns := namespaceFor(namespaced, item.Namespace)
	if inf := c.resources.informer(gvr); inf != nil {
		key := item.Name
		if ns != "" {
			key = ns + "/" + item.Name
		}
		if raw, ok, err := inf.GetStore().GetByKey(key); err == nil && ok {
			if obj, ok := raw.(metav1.Object); ok {
				return obj, nil
			}
		}
	}
	return c.metadata.Resource(gvr).Namespace(ns).Get(ctx, item.Name, metav1.GetOptions{})
}

func (c *Controller) patchObject(ctx context.Context, item objectReference, pt types.PatchType, patch []byte) (*metav1.PartialObjectMetadata, error) {
	gvr, namespaced, err := c.resources.mapping(item.APIVersion, item.Kind)
	if err != nil {
		return nil, err
	}
	return c.metadata.Resource(gvr).Namespace(namespaceFor(namespaced, item.Namespace)).Patch(ctx, item.Name, pt, patch, metav1.PatchOptions{})
}

// deleteObject deletes item with policy, preconditioned on its UID and on
// resourceVersion. On a conflict where the owner references have not changed since
// resourceVersion, it is retried without the resourceVersion precondition, so that
// frequent unrelated updates do not starve collection.
func (c *Controller) deleteObject(ctx context.Context, item objectReference, resourceVersion string, owners []metav1.OwnerReference, policy metav1.DeletionPropagation) error {
	gvr, namespaced, err := c.resources.mapping(item.APIVersion, item.Kind)
	if err != nil {
		return err
	}
	uid := item.UID
	pre := metav1.Preconditions{UID: &uid}
	if resourceVersion != "" {
		pre.ResourceVersion = &resourceVersion
	}
	client := c.metadata.Resource(gvr).Namespace(namespaceFor(namespaced, item.Namespace))
	err = client.Delete(ctx, item.Name, metav1.DeleteOptions{Preconditions: &pre, PropagationPolicy: &policy})
	if apierrors.IsConflict(err) && resourceVersion != "" {
		live, liveErr := client.Get(ctx, item.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(liveErr) {
			return liveErr
		}
		if liveErr == nil && live.UID == item.UID && live.ResourceVersion != resourceVersion && reflect.DeepEqual(live.OwnerReferences, owners) {
			return c.deleteObject(ctx, item, "", nil, policy)
		}
	}
	return err
}

// finalizersPatch is the JSON merge patch that sets an object's finalizers, guarded by
// its resourceVersion.
type finalizersPatch struct {
	Metadata struct {
		ResourceVersion string   `json:"resourceVersion"`
		Finalizers      []string `json:"finalizers"`
	} `json:"metadata"`
}

// removeFinalizer removes finalizer from owner: a live GET, then a JSON merge patch with
// the finalizers left and the resourceVersion read, retried on conflict. An owner gone,
// or without the finalizer, is done.
func (c *Controller) removeFinalizer(ctx context.Context, owner objectReference, finalizer string) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		obj, err := c.getObject(ctx, owner)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cannot finalize owner %s, because cannot get it: %w. The garbage collector will retry later", owner, err)
		}
		if !slices.Contains(obj.Finalizers, finalizer) {
			return nil
		}
		var p finalizersPatch
		p.Metadata.ResourceVersion = obj.ResourceVersion
		for _, f := range obj.Finalizers {
			if f != finalizer {
				p.Metadata.Finalizers = append(p.Metadata.Finalizers, f)
			}
		}
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		_, err = c.patchObject(ctx, owner, types.MergePatchType, data)
		return err
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("updateMaxRetries(%d) has reached. The garbage collector will retry later for owner %v", retry.DefaultBackoff.Steps, owner)
	}
	return err
}

// patchWithFallback applies a strategic merge patch to item, and where the resource does
// not support one (custom resources: 415 Unsupported Media Type) the JSON merge patch
// jmp builds.
func (c *Controller) patchWithFallback(ctx context.Context, item objectReference, smp []byte, jmp func() ([]byte, error)) error {
	_, err := c.patchObject(ctx, item, types.StrategicMergePatchType, smp)
	if err == nil || !apierrors.IsUnsupportedMediaType(err) {
		return err
	}
	data, err := jmp()
	if err != nil {
		return err
	}
	_, err = c.patchObject(ctx, item, types.MergePatchType, data)
	return err
}

// deleteOwnerRefsSMP is the strategic merge patch that removes the owner references of
// owners from the object of uid (the patch's uid is a precondition).
func deleteOwnerRefsSMP(uid types.UID, owners []types.UID) []byte {
	type deleteRef struct {
		Patch string    `json:"$patch"`
		UID   types.UID `json:"uid"`
	}
	var p struct {
		Metadata struct {
			OwnerReferences []deleteRef `json:"ownerReferences"`
			UID             types.UID   `json:"uid"`
		} `json:"metadata"`
	}
	for _, o := range owners {
		p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, deleteRef{Patch: "delete", UID: o})
	}
	p.Metadata.UID = uid
	data, _ := json.Marshal(p)
	return data
}

// ownerRefsPatch is a JSON merge patch that replaces an object's owner references,
// guarded by its resourceVersion.
type ownerRefsPatch struct {
	Metadata struct {
		ResourceVersion string                  `json:"resourceVersion"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
}

// deleteOwnerRefsJMP builds the JSON merge patch that keeps item's owner references but
// those of owners, from the cached (or live) object.
func (c *Controller) deleteOwnerRefsJMP(ctx context.Context, item objectReference, owners []types.UID) ([]byte, error) {
	obj, err := c.cachedOrLive(ctx, item)
	if err != nil {
		return nil, err
	}
	var p ownerRefsPatch
	p.Metadata.ResourceVersion = obj.GetResourceVersion()
	for _, ref := range obj.GetOwnerReferences() {
		if !slices.Contains(owners, ref.UID) {
			p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ref)
		}
	}
	return json.Marshal(p)
}

// unblockOwnerRefsSMP is the strategic merge patch that sets blockOwnerDeletion false on
// each of the blocking references among owners, of the object of uid.
func unblockOwnerRefsSMP(uid types.UID, owners []metav1.OwnerReference) []byte {
	var p struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
			UID             types.UID               `json:"uid"`
		} `json:"metadata"`
	}
	no := false
	for _, ref := range owners {
		if isBlocking(ref) {
			ref.BlockOwnerDeletion = &no
			p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ref)
		}
	}
	p.Metadata.UID = uid
	data, _ := json.Marshal(p)
	return data
}

// unblockOwnerRefsJMP builds the JSON merge patch that sets blockOwnerDeletion false on
// every one of owners, with the resourceVersion of the cached (or live) object.
func (c *Controller) unblockOwnerRefsJMP(ctx context.Context, item objectReference, owners []metav1.OwnerReference) ([]byte, error) {
	obj, err := c.cachedOrLive(ctx, item)
	if err != nil {
		return nil, err
	}
	var p ownerRefsPatch
	p.Metadata.ResourceVersion = obj.GetResourceVersion()
	no := false
	for _, ref := range owners {
		ref.BlockOwnerDeletion = &no
		p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ref)
	}
	return json.Marshal(p)
}
