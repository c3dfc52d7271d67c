// Package controllers is the controller contract of kshard: what a controller declares
// (Descriptor: its name as kube-controller-manager knows it, workers, primary resources,
// the informers it reads, the permissions it needs beyond reading them) and what it gets
// (Context: one informer accessor limited to what it declared, its work queue and any
// further queues it declared (Descriptor.Queues), a client, an event recorder, a logger,
// metrics), plus --controllers, the worker-count flags and the worker loop every
// controller shares (RunWorkers).
//
// Controllers do not know they are sharded: their informers hold only the shard's
// namespaces, each of their queues admits only keys of namespaces the shard works, and
// the shard fills each queue with the keys of every object of its primary resources in a
// namespace when it starts working it. Nothing else about sharding reaches them, and this package does not import
// the sharding layer.
//
// Each controller lives in its own package, pkg/controllers/<name>, and is listed once in
// the shard command's Descriptors(); docs/controllers.md ("Write a controller") walks
// through one. Test-only controllers live under pkg/controllers/testing, or in the test
// tree when a test builds its own shard binary.
package controllers
