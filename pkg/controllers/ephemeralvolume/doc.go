// Package ephemeralvolume is kshard's ephemeral volume controller ("ephemeral-volume",
// kube-controller-manager 1.37's ephemeral-volume-controller), equal in behaviour to
// upstream's: for every generic ephemeral volume of a pod that is not being deleted, it
// creates the PersistentVolumeClaim of the volume's template, named <pod>-<volume>
// (k8s.io/component-helpers/storage/ephemeral's VolumeClaimName), with the template's
// labels, annotations and spec, and controlled by the pod (an owner reference with
// controller and blockOwnerDeletion true), so that the garbage collector deletes it with
// the pod.
//
// A claim of that name that exists and is not controlled by the pod is not the pod's: the
// controller records a Warning event FailedBinding on the pod, "ephemeral volume <volume>:
// PVC <ns>/<claim> was not created for pod <ns>/<pod> (pod is not owner)", and retries the
// pod with backoff (the event again each time), as upstream does; a failed create is
// recorded the same way ("ephemeral volume <volume>: create PVC <claim>: <error>"). Events
// come from the component ephemeral_volume, upstream's name.
//
// A pod is queued when it is added (a pod's volumes never change), and again when a claim
// a pod names is deleted (the index by claim, internal/podclaims), so that a claim deleted
// under a running pod is created again. A namespace's new owner queues every pod of it.
// The series ephemeral_volume_controller_create_total and
// ephemeral_volume_controller_create_failures_total count the creates, as upstream's do.
package ephemeralvolume
