// Package partition maps namespaces to partitions, the unit of ownership in
// kshard.
//
// A deployment has a fixed number of partitions P (default 4096). A namespace
// belongs to partition xxhash64(name) mod P. The hash is a well-mixed 64-bit
// function, so names that differ only in their last characters
// (tenant-00000, tenant-00001, …) spread evenly; contiguous ranges of FNV-1a
// would not (see docs/design.md). Cluster-scoped Namespace objects follow
// their own name's partition.
//
// The mapping is the same one github.com/buraksezer/consistent computes in
// FindPartitionID with an xxhash Hasher, so package ring and this package
// agree without one importing the other's state. P must not change while a
// deployment runs: every shard and coordinator must agree on it.
package partition
