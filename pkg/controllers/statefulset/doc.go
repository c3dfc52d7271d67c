// Package statefulset is kshard's StatefulSet controller ("statefulset"), equal in
// behaviour to kube-controller-manager v1.37's: it gives each StatefulSet the pods
// "<set>-<ordinal>" for ordinals spec.ordinals.start … start+replicas-1, each with its
// stable identity (hostname, subdomain = serviceName, the labels
// statefulset.kubernetes.io/pod-name, apps.kubernetes.io/pod-index and
// controller-revision-hash) and the claims of its volumeClaimTemplates, and reports the
// counts and revisions `kubectl rollout status` waits for.
//
// One sync of a StatefulSet:
//
//  1. Adopt the namespace's orphan ControllerRevisions its selector matches, and claim
//     pods: adopt matching orphans whose names are the set's, release owned pods that no
//     longer match (internal/claim).
//  2. Find the update revision (the spec.template as a strategic merge patch, named with
//     upstream's hash: internal/history) and the current one (status.currentRevision),
//     recording a new revision or renumbering an earlier equal one (a rollback, `kubectl
//     rollout undo`).
//  3. Work the pods (update.go): replace Failed and Succeeded pods, create missing pods and
//     their claims, fix identity, storage and the claims' owner references that carry
//     persistentVolumeClaimRetentionPolicy (retention.go), delete pods past the last
//     ordinal. OrderedReady does one pod at a time, waiting for each to be Running, Ready
//     and available (minReadySeconds); Parallel works on all at once in slow-start
//     batches. Then RollingUpdate deletes pods of other revisions from the highest ordinal
//     down to the partition, within maxUnavailable (MaxUnavailableStatefulSet, on by
//     default in 1.37); OnDelete leaves that to the user.
//  4. Write the status (status.go) when it changed, complete a finished rollout (current
//     revision := update revision), delete revisions beyond revisionHistoryLimit that no
//     pod uses, and requeue when a ready pod will turn available after minReadySeconds.
//
// Events are upstream's: SuccessfulCreate, SuccessfulUpdate, SuccessfulDelete and their
// Failed counterparts for pods and claims, ConflictingController, UnknownStrategy.
//
// The controller keeps nothing in memory that a namespace's next owner needs: a
// StatefulSet's progress is in its pods (names are ordinals, so a pod is never created
// twice: a second create fails as AlreadyExists), its revisions and its status. As
// upstream 1.37 does (StaleControllerConsistencyStatefulSet, beta, on), a sync waits until
// the StatefulSet, pod and claim caches have reached the resourceVersions of the
// controller's own last writes for that set (internal/consistency).
package statefulset
