// Package podclaims indexes a pod informer by the PersistentVolumeClaims its pods use,
// directly (a persistentVolumeClaim volume) or through a generic ephemeral volume (the
// claim named <pod>-<volume>, k8s.io/component-helpers/storage/ephemeral), as
// kube-controller-manager's volume controllers share one such index. The PVC protection
// controller asks it which cached pods may keep a claim in use; the ephemeral volume
// controller, which pods to look at again when a claim is deleted. Both add it to the
// shard's one pod informer, so the index is built once.
package podclaims
