// Package deployment is the Deployment controller, equal in behaviour to
// kube-controller-manager v1.37's: it rolls a Deployment's pod template out through
// ReplicaSets (RollingUpdate within maxSurge and maxUnavailable, or Recreate), names them
// "<deployment>-<pod-template-hash>" with upstream's hash so that a cluster handed over
// from upstream keeps its ReplicaSets, keeps the revision annotations `kubectl rollout
// history|undo` read, scales proportionally when a Deployment is resized mid-rollout,
// cleans up old ReplicaSets beyond revisionHistoryLimit, and reports the Progressing and
// Available conditions and the replica counts `kubectl rollout status` waits for.
//
// The files follow the concerns of upstream's controller: deployment.go (construction,
// event handlers, the sync entry point), sync.go (scaling, status, the new ReplicaSet,
// cleanup), rolling.go, recreate.go, progress.go (conditions and the progress deadline),
// revision.go (annotations), rollback.go (the deprecated rollback annotation) and hash.go
// (ReplicaSet names; the pod-template-hash itself is internal/templatehash's).
// The controller does not know it is sharded: it uses the shard's listers and queue only.
package deployment
