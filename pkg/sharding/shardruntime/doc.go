// Package shardruntime is the shard's body: it carries out what the session's state
// machine decides (warm a partition's caches, work it, drain it, stop it, drop it) on the
// cache layer (shardcache) and the ownership gate (gate), and runs the controllers. It
// is the session's shardrpc.Handler but knows nothing of the wire: it does not import
// protocol, and the shard command hands its Stats to the session as protocol.Stats. When
// it starts working a partition it adds the key of every cached primary object of it to
// each controller's queues (each queue the keys of its own primary resources), so no
// controller needs to know that partitions move. It knows controllers only as a small
// struct (Controller: queues with their primary resources, a Run func); it does not
// import pkg/controllers.
//
// Operations on one partition run in the order they were issued, one at a time (a drop
// followed at once by a new warm-up of the same partition must not interleave), while
// different partitions proceed in parallel.
//
// The cache, not the runtime, decides when informers start and whether a partition is
// synced (shardcache.Cache.Run, Prepare, Synced).
package shardruntime
