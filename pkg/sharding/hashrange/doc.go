// Package hashrange turns a set of owned namespaces into a few KEP-5866 shardRange
// selectors.
//
// kube-apiserver's ShardedListAndWatch feature (KEP-5866) filters LIST and WATCH by
// ListOptions.ShardSelector, an OR of shardRange(object.metadata.namespace, start, end)
// calls, each a half-open interval [start, end) over the 64-bit FNV-1a hash of the
// namespace name. A selector may hold about 1,170 ranges (100,000 code points).
//
// kshard's partitions are xxhash-based, so the namespaces a shard owns are scattered in
// FNV space. Build sorts every known namespace by FNV-1a hash, makes one range per maximal
// run of owned namespaces, and, while there are more than the allowed number of ranges,
// closes the gaps that hold the fewest foreign namespaces. The result is a superset
// filter: every owned namespace is covered, some foreign ones may be. One of 4 shards
// owning 2,500 of 10,000 namespaces has about 1,900 runs, so one selector is a loose
// superset there (57 % of the cluster at 500 ranges). BuildSliced splits the hash space
// into 2^k equal slices, a selector (and a watch) each, with k the smallest that keeps
// every slice exact: a namespace belongs to one slice, so its events come through one
// watch. Callers keep their
// own exact filter; the server's filter only saves decoding and bandwidth. Owning nothing
// is the one hash of a name no namespace can have (the apiserver refuses empty ranges). A namespace
// that appears later in a gap is not covered until the ranges are built again.
package hashrange
