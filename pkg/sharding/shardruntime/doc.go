// Package runtime is the shard's body: it owns the cache layer, the fenced work queues
// and the controllers, and carries out what the session's state machine decides (warm a
// partition's caches, work it, drain it, stop it, drop it). It implements
// session.Handler.
//
// Operations on one partition run in the order they were issued, one at a time (a drop
// followed at once by a new warm-up of the same partition must not interleave), while
// different partitions proceed in parallel.
//
// Informers start lazily: the Warm actions of a shard's first assignment (usually
// thousands of partitions) are collected for a short window first, so the informers'
// first cluster-wide filtered list fills them all at once instead of thousands of
// namespace-scoped lists.
package shardruntime
