// Package job is kshard's Job controller ("job"), equal in behaviour to
// kube-controller-manager 1.37's: it runs a Job's pods until enough succeed
// (completions; NonIndexed or Indexed) or the Job fails, and reports them in its status.
//
// One sync of a Job (sync.go):
//
//  1. Claim pods: its own and its namespace's matching orphans (adopted with the
//     batch.kubernetes.io/job-tracking finalizer), as the ReplicaSet controller does.
//  2. Decide whether the Job ends, in upstream's order: an earlier SuccessCriteriaMet or
//     FailureTarget condition stands; then a podFailurePolicy FailJob rule, backoffLimit
//     (failed pods, or container restarts with restartPolicy OnFailure),
//     activeDeadlineSeconds, backoffLimitPerIndex's failed indexes and maxFailedIndexes;
//     then successPolicy, then completions.
//  3. An ending Job's active pods are deleted; a running one is managed (manage.go):
//     pods created or deleted so that parallelism bounded by the completions left run,
//     none while suspended, after the exponential pod failure backoff (10s doubling to
//     10m, backoff.go, or per index), at most 500 per sync in slow-start batches; Indexed
//     Jobs get the lowest pending indexes (completion-index annotation and label,
//     JOB_COMPLETION_INDEX, hostname <job>-<index>, generateName <job>-<index>-).
//  4. Count finished pods exactly once and write the status (tracking.go): a finished pod
//     first goes into status.uncountedTerminatedPods (or completedIndexes), then its
//     finalizer is removed, then it moves into succeeded/failed. Terminal conditions come
//     in two steps: FailureTarget or SuccessCriteriaMet first, Failed or Complete (with
//     completionTime and the Completed or failure event) once no pod is uncounted or
//     terminating.
//
// In-memory state — expectations of pod creates and deletes (internal/expectations) and
// of finalizer removals (expectations.go), the failure backoff records — is rebuilt from
// the objects by whoever syncs the Job next, as after a kube-controller-manager restart: a shard that takes a
// namespace over counts every pod from the status and the finalizers alone. It is
// forgotten when the Job leaves the cache (deleted, or its namespace left the shard), so a
// namespace that comes back starts from the objects too.
//
// As kube-controller-manager 1.37 does (StaleControllerConsistencyJob), a sync first waits
// until the Job and pod caches show the controller's own last writes for the Job (its
// status writes, the pods it created or patched): it fails and is retried with backoff
// instead of counting or creating again from an older cache (internal/consistency).
//
// The controller exports upstream's job_controller_* series (metrics.go) through the
// shard's registry: syncs by action, finished Jobs, pods and indexes, podFailurePolicy
// actions, pod creations, terminated pods holding the tracking finalizer, Jobs of other
// controllers, syncs put off by a stale cache.
//
// spec.managedBy: with the default --job-managed-by=kubernetes.io/job-controller the
// controller works Jobs whose managedBy is unset or that value (kube-controller-manager's
// job controller must then be off); with --job-managed-by=kshard.io/job-controller only
// Jobs that name kshard, beside a kube-controller-manager that keeps its own on. Jobs
// managed by anybody else are never touched, nor are their pods' finalizers.
package job
