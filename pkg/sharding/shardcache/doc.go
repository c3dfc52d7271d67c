// Package shardcache is the cache layer of a kshard shard: the informers and listers that the
// shard's controllers read, holding only the namespaces of the partitions the shard has
// prepared or acquired.
//
// # Shape
//
// A shard runs ONE client-go SharedIndexInformer per resource type, watching the whole
// cluster (or, with ModeServerFilter, the part a shard selector covers), so the number of watches is small and does not grow with the number of
// namespaces. Each informer's ListerWatcher is a feed (feed.go) that filters before the
// store: list results and watch events of namespaces whose partition is not admitted are
// dropped, so the store, and with it the shard's memory, holds about 1/N of the cluster.
// managedFields are stripped on the way in (StripManagedFields). A Namespace informer,
// unfiltered and indexed by partition (PartitionIndex), tells which namespaces a partition
// has. Cluster-scoped types (Nodes, …) are cached whole, in unfiltered informers.
// Controllers get ordinary client-go informers from one accessor keyed by resource
// (Informer: typed for the built-in types, metadata-only for any served resource) and
// never learn about sharding. Keys(resource, partition) lists a partition's objects, for
// the runtime to enqueue when it starts working the partition.
//
// The cache owns the informers' start and "synced": after Run, the first Prepares start
// them once they pause (a tenth of StartWindow; at most StartWindow after the first), so
// that the first assignment is filled by one filtered list per type; Prepare returns once its partitions are cached, and Synced answers readiness.
//
//	c, err := shardcache.New(client, partitionOf, shardcache.Options{})
//	podsKey := shardcache.Key{Resource: corev1.SchemeGroupVersion.WithResource("pods")}
//	pods, err := c.Informer(podsKey)       // before the start; controllers add their handlers
//	c.Run(ctx)                             // the cache starts its informers itself
//	_ = c.Prepare(ctx, initial)            // first assignment: one filtered list per type fills it
//	_ = c.Prepare(ctx, []partition.ID{17}) // later: warms partition 17 in every informer
//	keys, _ := c.Keys(podsKey, 17)         // its objects, to enqueue
//	_ = c.Release(ctx, []partition.ID{17}) // drops it again; handlers see deletes
//
// # Warming a partition without relisting the cluster
//
// Prepare on a running cache lists each namespace of the partition (namespace-scoped,
// bounded concurrency) and merges the lists into the running cluster-wide watch. For one
// namespace and resource type:
//
//  1. The feed starts buffering the namespace's watch events.
//  2. The namespace is listed, at resourceVersion L (a consistent read).
//  3. The watch goroutine injects, at its current position: the listed objects (ADDED or
//     MODIFIED), DELETED for objects the shard had but the list no longer has, then the
//     buffered events with resourceVersion > L, then a BOOKMARK at the newest real
//     resourceVersion of the streams, which moves the reflector's (and the store's)
//     resourceVersion back to where the streams are after the older injected objects.
//     An object created while the namespace was buffered is told by all its buffered
//     events instead of by the list (then brought to the list's version if the watch was
//     behind it), so that handlers see its creation: a namespace that appears in a
//     partition being worked is warmed too, and controllers count their creations by
//     the ADDED event.
//  4. Upstream events of the namespace at or below L are dropped from then on: a watch
//     lagging behind the list must not take objects back in time.
//
// resourceVersions are compared as integers, which KEP-5504 makes valid on this
// apiserver; a resourceVersion that is not an integer is treated as newer than anything.
//
// Before Start, Prepare only admits partitions: the informers' first list, filtered,
// fills them all with one cluster-wide list per resource type instead of one list per
// namespace.
//
// # Restarts and relists
//
// client-go's reflector may call List or Watch again at any time, so the feed keeps its
// state across calls, not in a watch:
//
//   - Everything the reflector receives goes through one output queue owned by the feed;
//     a watch that ends leaves its undelivered events to the next watch, so an injected
//     batch is never lost or split by a restart.
//   - The feed tracks, per upstream stream (one, or one per slice of a server-side
//     selector), the newest resourceVersion it has accounted for (high-water mark). A new
//     watch resumes each stream from its own, whatever the reflector asks for (the
//     reflector may have recorded an injected object's older version, or another
//     stream's), and upstream events at or below it are duplicates and are dropped.
//   - Each object's resourceVersion only moves forward in the store. With several streams
//     the store's own resourceVersion does not (the streams are not ordered against each
//     other), so the informer's store also answers LastStoreSyncResourceVersionIn(namespace):
//     how far it has applied the stream carrying the namespace, which the controllers'
//     read-your-writes guard (pkg/controllers/internal/consistency) asks instead.
//   - A relist (List, or a streaming list's initial events) starts a new epoch: the queue,
//     buffers and floors are discarded, because the relist's Replace supersedes them, and
//     warm-ups begun before it are covered by it (it was filtered with their partitions
//     admitted) instead of being merged.
//   - The streaming list mode of client-go 0.37 (WatchListClient) is supported: initial
//     events are filtered like list items, the initial-events-end bookmark passes through
//     (with several streams, one, once every stream has sent its own), and no merge
//     happens before it. Options.DisableWatchList forces classic LIST+WATCH. The
//     watch-list consistency detector (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR, a test aid)
//     is not meaningful with several streams: its list at the relist's resourceVersion
//     cannot match a store that already holds a faster stream's newer events.
//
// The feed keeps a shadow of its store (names and object pointers, shared with the store)
// as it will be once every queued event has been applied. Release and the warm-up's
// stale-object deletes are computed from it, not from the informer's indexer, which lags
// behind the queue.
//
// # Releasing
//
// Release revokes admission first (new events of the partition are dropped), then queues
// a DELETED event for every object of the partition behind the events already queued, so
// handlers see the deletes in stream order, and waits until the stores no longer hold the
// partition.
//
// # Server-side filtering
//
// With ModeServerFilter (the shard's --server-side-filtering) the apiserver filters too,
// by KEP-5866 selectors (ListOptions.ShardSelector; kube-apiserver's ShardedListAndWatch
// gate): shardRange(object.metadata.namespace, start, end) calls over the FNV-1a hash of
// the namespace. Partitions are xxhash-based, so a shard's namespaces are scattered in
// FNV space, and one selector holds about 1,170 ranges: too few to name the 2,500
// namespaces of one of 4 shards at 10,000. So pkg/sharding/hashrange splits the hash
// space into 2^k equal slices (Options.MaxSelectorWatches at most, as few as keep every
// slice exact) and builds, per slice, at most Options.MaxSelectorRanges ranges that cover
// every known namespace of the admitted partitions in it (exact when the ranges suffice,
// a superset otherwise; the feed's own filter stays authoritative, and an apiserver that
// ignores the selector is logged once). Each feed merges one upstream watch per slice
// (streams.go): a namespace's events come through one of them, in order, and each
// stream keeps its own high-water mark, from which its watch resumes; an upstream watch
// that ends after a second reopens alone, the others keep going. A slice with few
// namespaces advances its mark only with their events and the apiserver's bookmarks, so
// its reopen may ask for a resourceVersion the watch cache no longer has: the reflector
// then relists (correct, at the price of a relist). A classic relist
// lists every slice within one List call; a streamed one completes once every stream
// has sent its initial-events-end bookmark, at the oldest stream's position. The number
// of slices only grows (a stream splits into the finer slices, which start from its
// position; streams are never merged). The Namespace informer and the cluster-scoped
// ones are not filtered.
//
//   - A relist (the first list included) recomputes the selector after its reset, once
//     the Namespace informer has synced, so it covers every warm-up it subsumes.
//   - The coverage grows when Prepare admits partitions (recomputed after 100ms of quiet)
//     or a namespace of an admitted partition appears outside the ranges (after
//     Options.SelectorDebounce of quiet, so that a burst of namespaces costs one restart).
//     Each feed's watch then reopens the upstream watches of the slices that changed,
//     each from its stream's high-water mark with the new selector, without ending the
//     reflector's watch; from the change on, the old upstream's events are not accounted
//     for (the high-water mark stays), so the new watch delivers them again if they
//     match.
//   - A warm-up lists a namespace (or, in bulk, many, with the selector) only once the
//     selector in force covers it and no relist runs: the list's resourceVersion is then
//     at or above the point from which the watch carries the namespace, and no event
//     falls between the two. Objects of a namespace created after the start may be older
//     than the watch's position, which is why such a namespace is warmed, not only
//     watched; its lists are merged type by type, dependents first (ownerRank), so that
//     a controller sees an owner's pods when the owner appears.
//   - Release does not shrink the selector at once (a superset is harmless): the
//     recomputation waits until the covered namespaces that are not owned outnumber the
//     owned ones.
//
// Metrics: kshard_shard_cache_selector_ranges{resource} (over every slice),
// kshard_shard_cache_selector_restarts_total{resource} and
// kshard_shard_cache_namespaces_covered_not_owned.
//
// # Where things are
//
// Each file holds one concern and opens with the invariants it keeps.
//
// The Cache, what the shard runtime and the controllers call:
//
//	options.go    Options and Mode; defaults
//	cache.go      the Cache, its informers by Key (typed, metadata-only, cluster-scoped), Keys
//	start.go      starting the informers: lazily after Run, or Start; WaitForCacheSync
//	partition.go  Prepare, Release, Synced: admitting and dropping partitions
//	remove.go     Remove: stopping the informer of a resource no longer served
//	optional.go   optional informers (resources found by discovery): nobody waits while they fail
//	warmup.go     warming a partition while the informers run, namespace by namespace; Refresh
//	admission.go  the admitted partitions (a lock-free bitset), PartitionFunc, PartitionIndex
//	filter.go     ModeServerFilter's selector: computed, grown, shrunk, handed to the feeds
//	stats.go      statistics and metrics
//	resource.go   the built-in resource types; objects.go, quiet.go: small helpers
//
// A feed, the ListerWatcher of one filtered informer:
//
//	feed.go       the feed type, its state by concern, and what holds across them
//	list.go       the list path: relists (epochs) and paged lists
//	merge.go      watch and merge: a watch call's upstream events, the output queue
//	inject.go     a warm-up's list merged into the stream; floors; bookmarks
//	shadow.go     the shadow of the store, and release
//	streams.go    the upstream streams: positions, slices, reopening on a selector change
//	nssync.go     one namespace's warm-up in the feed: buffer, list, merge
//	bulk.go       cluster-wide lists that warm many namespaces at once
//	applied.go    how far the store has applied each stream (read-your-writes)
//	watch.go      one watch call of the reflector: the goroutine that delivers
package shardcache
