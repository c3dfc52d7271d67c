// Package placement turns what the coordinator reads of Namespaces and of its own flags
// into the per-partition inputs of placement by load (docs/design-placement.md §2.1, §3):
// how many namespaces each partition holds, and which shard group, if any, each
// partition is pinned to.
//
// It is pure (Resolve takes the namespaces as a slice and returns new tables), so that
// the rules of pinning — the flag wins, an annotation counts only for the groups the
// operator allows, two different pins in one partition unpin it — are unit-tested apart
// from informers and the state machine. The coordinator's edge (cmd/coordinator/app)
// feeds it from a metadata informer on Namespaces and hands the result to
// coordinatorrpc.Server.SetPlacement, which passes it to the state machine.
//
// Pins are of partitions, not namespaces: a partition is what moves, so a pin moves the
// pinned namespace together with every namespace that hashes to its partition.
package placement
