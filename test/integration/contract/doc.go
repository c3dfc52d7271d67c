// Package contract tests the controller contract end to end: a controller written only
// against pkg/controllers, in the test tree (package stamp), run by real shard processes
// built with it (cmd/contract-shard) against the local control plane. It must be handed
// every object of its namespaces when a shard starts working them, and lose them when
// they move to another shard, across real handoffs, although it has no line of sharding
// code and not even an event handler.
package contract
