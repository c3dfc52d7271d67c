// Package edgetest holds the end-to-end tests of kshard's gRPC session edges (pkg/sharding/coordinatorrpc and pkg/sharding/shardrpc) together, because they share one harness: a real coordinator server, real session clients and fake shard handlers that check no partition is worked twice.
package edgetest
