package podclaims

import (
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/ephemeral"
)

// Index names the pod index by claim that AddIndex adds. Its keys are "<namespace>/<claim>".
const Index = "kshard.io/pod-pvc"

// ClaimNames returns the names of the claims pod's volumes use: a persistentVolumeClaim
// volume's claimName, and the <pod>-<volume> claim of each generic ephemeral volume
// (which may turn out not to be the pod's: ephemeral.VolumeIsForPod tells).
func ClaimNames(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, ephemeral.VolumeClaimName(pod, v))
		}
	}
	return out
}

func indexFunc(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, name := range ClaimNames(pod) {
		keys = append(keys, pod.Namespace+"/"+name)
	}
	return keys, nil
}

// AddIndex adds Index to a pod informer, once: a second call (both volume controllers
// share the shard's pod informer) does nothing. Call it before the informer starts.
func AddIndex(inf toolscache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[Index]; ok {
		return nil
	}
	return inf.AddIndexers(toolscache.Indexers{Index: indexFunc})
}

// Pods returns the cached pods of indexer (which must have Index) that name the claim
// namespace/name among their volumes' claims. The pods are the cache's: do not modify.
func Pods(indexer toolscache.Indexer, namespace, name string) ([]*corev1.Pod, error) {
	objs, err := indexer.ByIndex(Index, namespace+"/"+name)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out, nil
}
