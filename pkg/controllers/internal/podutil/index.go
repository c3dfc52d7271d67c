package podutil

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// ControllerIndex names the pod index by controllerRef that AddControllerIndex adds: a
// controller finds its own pods and its namespace's orphans without scanning the
// namespace.
const ControllerIndex = "kshard.io/pod-controller"

// controllerIndexKey is "<namespace>/<kind>/<name>/<uid>" for a controlled pod and
// "<namespace>" for an orphan.
func controllerIndexKey(namespace string, ref *metav1.OwnerReference) string {
	if ref == nil {
		return namespace
	}
	return namespace + "/" + ref.Kind + "/" + ref.Name + "/" + string(ref.UID)
}

// AddControllerIndex adds ControllerIndex to a pod informer, once: a second call (the
// ReplicaSet and the Deployment controller share the shard's pod informer) does nothing.
// Call it before the informer starts.
func AddControllerIndex(inf toolscache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[ControllerIndex]; ok {
		return nil
	}
	return inf.AddIndexers(toolscache.Indexers{ControllerIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{controllerIndexKey(pod.Namespace, metav1.GetControllerOfNoCopy(pod))}, nil
	}})
}

// Owner identifies a controller object for ByController.
type Owner struct {
	Namespace, Kind, Name string
	UID                   types.UID
}

// ByController returns the pods of indexer (which must have ControllerIndex) whose
// controllerRef is owner, plus, with orphans, the pods of owner's namespace that have no
// controller at all (candidates for adoption). The pods are the cache's: do not modify.
func ByController(indexer toolscache.Indexer, owner Owner, orphans bool) ([]*corev1.Pod, error) {
	if owner.Namespace == "" || owner.Kind == "" || owner.Name == "" || owner.UID == "" {
		return nil, fmt.Errorf("incomplete owner %+v: namespace, kind, name and uid are required", owner)
	}
	keys := []string{controllerIndexKey(owner.Namespace, &metav1.OwnerReference{Kind: owner.Kind, Name: owner.Name, UID: owner.UID})}
	if orphans {
		keys = append(keys, owner.Namespace)
	}
	var out []*corev1.Pod
	for _, k := range keys {
		objs, err := indexer.ByIndex(ControllerIndex, k)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if pod, ok := o.(*corev1.Pod); ok {
				out = append(out, pod)
			}
		}
	}
	return out, nil
}
