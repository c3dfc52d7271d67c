// Package controllers is the registry of the controllers a shard runs, by the names
// kube-controller-manager uses (deployment, replicaset, job, …), and the Context through
// which the shard runtime hands each controller its listers, event handlers, work queues
// and clients. Controllers do not know they are sharded: their informers hold only the
// shard's partitions and their queues admit only keys of acquired partitions.
//
// Each controller lives in its own package, pkg/controllers/<name>, named as
// kube-controller-manager names it (the local control plane switches exactly those off in
// its kube-controller-manager). Test-only controllers live under pkg/controllers/testing.
package controllers
