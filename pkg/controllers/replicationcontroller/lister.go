package replicationcontroller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func corelistersFor(indexer toolscache.Indexer) corelisters.ReplicationControllerLister {
	return corelisters.NewReplicationControllerLister(indexer)
}

// lister serves cached ReplicationControllers as ReplicaSets. Which controllers select a
// pod is client-go's ReplicationController answer (GetPodControllers: the map selector,
// an empty one selecting nothing), not the ReplicaSet's.
type lister struct {
	rcs corelisters.ReplicationControllerLister
}

var _ appslisters.ReplicaSetLister = lister{}

func (l lister) List(selector labels.Selector) ([]*appsv1.ReplicaSet, error) {
	rcs, err := l.rcs.List(selector)
	return toReplicaSets(rcs), err
}

func (l lister) ReplicaSets(namespace string) appslisters.ReplicaSetNamespaceLister {
	return namespaceLister{rcs: l.rcs.ReplicationControllers(namespace)}
}

func (l lister) GetPodReplicaSets(pod *corev1.Pod) ([]*appsv1.ReplicaSet, error) {
	rcs, err := l.rcs.GetPodControllers(pod)
	return toReplicaSets(rcs), err
}

type namespaceLister struct {
	rcs corelisters.ReplicationControllerNamespaceLister
}

func (l namespaceLister) List(selector labels.Selector) ([]*appsv1.ReplicaSet, error) {
	rcs, err := l.rcs.List(selector)
	return toReplicaSets(rcs), err
}

func (l namespaceLister) Get(name string) (*appsv1.ReplicaSet, error) {
	rc, err := l.rcs.Get(name)
	if err != nil {
		return nil, err
	}
	return toReplicaSet(rc), nil
}

func toReplicaSets(rcs []*corev1.ReplicationController) []*appsv1.ReplicaSet {
	if rcs == nil {
		return nil
	}
	out := make([]*appsv1.ReplicaSet, len(rcs))
	for i, rc := range rcs {
		out[i] = toReplicaSet(rc)
	}
	return out
}
