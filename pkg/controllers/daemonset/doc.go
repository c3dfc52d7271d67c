// Package daemonset is kshard's DaemonSet controller ("daemonset"), equal in behaviour to
// kube-controller-manager v1.37's: it keeps one pod of each DaemonSet on every node the
// pod's scheduling constraints admit, rolls template changes out (RollingUpdate within
// maxUnavailable or maxSurge, or OnDelete), keeps the ControllerRevisions `kubectl rollout
// history|undo daemonset` read, and reports the counts `kubectl rollout status` waits for.
//
// One sync of a DaemonSet:
//
//  1. Claim ControllerRevisions and find (or create) the one of the current template,
//     named "<daemonset>-<hash>" with upstream's template hash so that a cluster handed
//     over from upstream keeps its revisions and starts no rollout (revisions.go).
//  2. Unless earlier creates and deletes have not been observed yet (expectations), for
//     every node: create the pod a node that should run it lacks, delete pods from nodes
//     that must not run it, extra pods, and failed pods (with a per-node backoff, 1 s
//     doubling to 15 min) (sync.go). A pod is pinned to its node the way upstream pins
//     it: a required node affinity on the field metadata.name, not spec.nodeName; the
//     scheduler binds it. Which nodes should run a pod is upstream's predicate: the
//     template's nodeName, node selector and required node affinity, and its taints
//     tolerated by the template's tolerations plus the ones every daemon pod gets
//     (predicates.go).
//  3. RollingUpdate replaces old pods within maxUnavailable, or with maxSurge starts the
//     new pod beside the old one and deletes the old one once the new one is available
//     (update.go); OnDelete waits for the user to delete old pods.
//  4. Delete old revisions beyond revisionHistoryLimit that no pod uses, and write the
//     status (status.go).
//
// Nodes are cluster-scoped and cached whole on every shard, DaemonSets, their pods and
// revisions are namespaced: a node's change queues the DaemonSets of the shard's own
// namespaces that it may affect (handlers.go), so each DaemonSet is reconciled against
// every node by the one shard that owns its namespace.
package daemonset
