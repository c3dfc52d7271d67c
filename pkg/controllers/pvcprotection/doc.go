// Package pvcprotection is kshard's PVC protection controller ("pvc-protection",
// kube-controller-manager 1.37's persistentvolumeclaim-protection-controller), equal in
// behaviour to upstream's:
//
//   - a claim not being deleted that lacks the kubernetes.io/pvc-protection finalizer gets
//     it (the API server's StorageObjectInUseProtection admission adds it on create; the
//     controller covers claims created without it);
//   - a claim being deleted keeps the finalizer while a pod uses it, and loses it once no
//     pod does. "Uses" is upstream's: a pod bound to a node (spec.nodeName set) that names
//     the claim in a persistentVolumeClaim volume (whatever the pod's phase), or in a
//     generic ephemeral volume whose claim is the pod's own (controlled by it), unless the
//     pod is shut down (deleted with a zero grace period: the kubelet is done with it, or
//     it was force-deleted). The cached pods are asked first, through the pod index by
//     claim (internal/podclaims); only when none of them uses the claim are the
//     namespace's pods listed from the API server, so that a pod the cache has not seen
//     yet still keeps the claim;
//   - a Bound claim not being deleted carries the Unused condition (upstream's
//     PersistentVolumeClaimUnusedSinceTime, beta and on by default in 1.37): False with
//     reason PodUsingPVC while a pod that has not terminated names it (bound to a node or
//     not), True with reason NoPodsUsingPVC otherwise, its lastTransitionTime the moment
//     the controller wrote it. The same cache-then-live-list check decides.
//
// The queue holds claim keys. A claim is queued when it is added or updated and lacks the
// Unused condition, lacks the finalizer, or is being deleted with it; every pod added,
// updated or deleted queues the claims it names (and, when an update replaced a pod by a
// new one of the same name, the old pod's claims too).
//
// Nothing is kept in memory: a namespace's new owner queues every claim of it, and each
// sync decides from the claim, the cached pods and the live list.
package pvcprotection
