package disruption

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// scaled is a pod's controller and its desired number of pods.
type scaled struct {
	uid      types.UID
	replicas int32
}

// finder resolves a pod's controller reference to a controller it knows, returning nil
// (and no error) when the reference is not of its kind or the controller is not found.
type finder func(ctx context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error)

// finders are tried in upstream's order: the kinds the shard caches first (no request),
// the scale subresource of any other kind last.
func (c *Controller) finders() []finder {
	return []finder{c.replicationController, c.deploymentOfReplicaSet, c.replicaSet, c.statefulSet, c.scaleSubresource}
}

// refIs reports whether ref is of kind in one of groups; an apiVersion that does not parse
// is an error.
func refIs(ref *metav1.OwnerReference, kind string, groups ...string) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, err
	}
	return ref.Kind == kind && slices.Contains(groups, gv.Group), nil
}

func (c *Controller) replicationController(_ context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error) {
	if ok, err := refIs(ref, "ReplicationController", ""); !ok || err != nil {
		return nil, err
	}
	rc, err := c.rcLister.ReplicationControllers(namespace).Get(ref.Name)
	if err != nil || rc.UID != ref.UID {
		return nil, nil // a lister's only error is NotFound
	}
	return &scaled{rc.UID, replicasOf(rc.Spec.Replicas)}, nil
}

// deploymentOfReplicaSet resolves a ReplicaSet reference to the Deployment that controls
// the ReplicaSet: a Deployment's budget counts the Deployment's replicas, not those of
// each of its ReplicaSets.
func (c *Controller) deploymentOfReplicaSet(_ context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error) {
	if ok, err := refIs(ref, "ReplicaSet", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil, nil
	}
	dref := metav1.GetControllerOf(rs)
	if dref == nil {
		return nil, nil
	}
	if ok, err := refIs(dref, "Deployment", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	d, err := c.dLister.Deployments(namespace).Get(dref.Name)
	if err != nil || d.UID != dref.UID {
		return nil, nil
	}
	return &scaled{d.UID, replicasOf(d.Spec.Replicas)}, nil
}

// replicaSet resolves a ReplicaSet reference to a ReplicaSet that no Deployment controls.
func (c *Controller) replicaSet(_ context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error) {
	if ok, err := refIs(ref, "ReplicaSet", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil, nil
	}
	if dref := metav1.GetControllerOf(rs); dref != nil && dref.Kind == "Deployment" {
		return nil, nil
	}
	return &scaled{rs.UID, replicasOf(rs.Spec.Replicas)}, nil
}

func (c *Controller) statefulSet(_ context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error) {
	if ok, err := refIs(ref, "StatefulSet", "apps"); !ok || err != nil {
		return nil, err
	}
	ss, err := c.ssLister.StatefulSets(namespace).Get(ref.Name)
	if err != nil || ss.UID != ref.UID {
		return nil, nil
	}
	return &scaled{ss.UID, replicasOf(ss.Spec.Replicas)}, nil
}

// scaleSubresource reads the scale subresource of the referenced object, of any kind the
// API server serves. A NotFound is nothing found when the resource has a scale
// subresource, and an error when it has none.
func (c *Controller) scaleSubresource(ctx context.Context, ref *metav1.OwnerReference, namespace string) (*scaled, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, err
	}
	mapping, err := c.scale.Mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return nil, err
	}
	gr := mapping.Resource.GroupResource()
	s, err := c.scale.Get(ctx, namespace, gr, ref.Name)
	if apierrors.IsNotFound(err) {
		has, derr := c.scale.HasScaleSubresource(mapping.Resource)
		if derr != nil {
			return nil, derr
		}
		if !has {
			return nil, fmt.Errorf("%s does not implement the scale subresource", gr.String())
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if s.UID != ref.UID {
		return nil, nil
	}
	return &scaled{s.UID, s.Spec.Replicas}, nil
}

// replicasOf is a defaulted replicas field (the API server defaults a missing one to 1).
func replicasOf(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}
