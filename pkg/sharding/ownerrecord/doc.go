// Package ownerrecord is the groundwork of kshard's server-side fence: the API server
// itself refuses a write by a shard to a namespace whose partition that shard does not
// own, so that a shard process paused between its last ownership check and the moment its
// request reaches the API server (GC pause, SIGSTOP, a partitioned node) cannot write
// late into a namespace that another shard now works.
//
// The fence has three parts, all in this package:
//
//   - The owner record. Every Namespace carries the label kshard.io/partition=<N>, where
//     N = partition.Map.For(name) in decimal (Labeler keeps it there), and one ConfigMap
//     in kshard's namespace (default name kshard-owners) maps each partition to the shard
//     that owns it: data["<N>"] = "<shard pod name>" (Writer maintains it). A partition
//     absent from the ConfigMap has no owner, and every shard write to it is refused. The
//     label is needed because admission CEL cannot compute the partition (xxhash) of a
//     namespace name; it only reads what the namespace object already says.
//
//   - The policy. A ValidatingAdmissionPolicy (Policy) with paramKind ConfigMap and its
//     binding (Binding, paramRef to the owner ConfigMap, validationActions [Deny],
//     parameterNotFoundAction Allow, see below) matches CREATE, UPDATE and DELETE of
//     namespaced resources (and their subresources) made by the shard ServiceAccount
//     only, and
//     allows one only when the namespace's partition label names a partition whose
//     owner in the ConfigMap equals the authentication.kubernetes.io/pod-name extra of
//     the request's bound ServiceAccount token. The chart's templates render the same
//     objects (test/integration/chart checks that they do).
//
//   - The wait. A new owner must not act before the API server enforces the new record,
//     and the coordinator must not tell the new owner to act before the old one is
//     refused. Prober makes a server-side dry-run write in a namespace of the moved
//     partition as a shard (the shard's own client, or the coordinator impersonating
//     it), and repeats it until admission answers as the new record says.
//
// What is not fenced, on purpose:
//
//   - Events (core/v1 and events.k8s.io), unless sent as a dry run. A shard's event
//     recorder sends events asynchronously, often after the reconcile that made them has
//     ended; a late event is an informative record, not a competing write to a
//     workload, and refusing it would only produce noise. Dry-run events are fenced
//     because they are the probe (see Prober): every shard may create events.
//   - Cluster-scoped requests (the match is Namespaced, and namespaceObject is null for
//     cluster-scoped ones anyway). Namespaces, Nodes, PersistentVolumes and the like are
//     worked through partition.ClusterKey's partition, which this record cannot express
//     per object. The fence covers namespaced workload objects only.
//   - Requests of every other user, including the coordinator (which patches the
//     partition labels) and the namespace controller.
//
// A missing owner ConfigMap fails open (parameterNotFoundAction Allow), not closed, and
// this is forced by how the API server (1.37) evaluates a policy: it resolves a
// binding's params before it evaluates the policy's matchConditions, so a "no params"
// error with parameterNotFoundAction Deny and failurePolicy Fail refuses every namespaced
// write in the cluster, by every user, including the coordinator's own create of the
// missing ConfigMap: a deadlock only deleting the binding ends (seen on the local
// control plane). With Allow, a deleted record leaves shards unfenced until the
// coordinator writes it again (Writer.Replace), and everyone else untouched. A record
// that exists but has no entry for a partition still refuses every shard write there.
// The other configuration error, a param informer not synced within a second (right
// after a kube-apiserver starts, when the policy is first loaded, or on a loaded API
// server), would under failurePolicy Fail refuse every namespaced write of every user
// for that moment (seen on the local control plane); the policy uses failurePolicy
// Ignore, so such a moment fences nobody instead. The coordinator never relies on a
// moment like that: it grants a partition only after a probe showed the API server
// refusing the previous owner (Prober).
//
// The ConfigMap as paramKind has a cost worth knowing: a ValidatingAdmissionPolicy's
// params are served from an informer the API server runs for the param kind across all
// namespaces, so with ConfigMap params every kube-apiserver keeps every ConfigMap of the
// cluster in memory (shared with any other policy that uses ConfigMap params). A
// dedicated CRD as paramKind would avoid that at the price of installing a CRD.
//
// Size: one ConfigMap holds every partition. With 4096 partitions and 40-byte pod names
// the data is about 200 KB; the 1 MiB object limit caps the scheme at roughly 20,000
// partitions with such names (Writer refuses to write a larger record).
package ownerrecord
