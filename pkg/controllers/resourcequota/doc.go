// Package resourcequota is kshard's ResourceQuota controller ("resourcequota", canonical
// name resourcequota-controller), equal in behaviour to kube-controller-manager 1.37's: it
// keeps every ResourceQuota's status current, status.hard a copy of spec.hard and
// status.used what the quota's namespace uses of each hard resource, so that the API
// server's quota admission, which charges creates against status but never releases
// anything, sees usage go down again when objects go away or shrink.
//
// Usage is computed from the shard's caches of the quota's own namespace: pods (compute
// requests and limits, hugepages, extended resources, the pods count of non-terminal
// pods), services (count, load balancers, node ports), PersistentVolumeClaims (count and
// storage, also per storage class), ResourceClaims (count, devices per device class, and
// the extended resources device classes provide, read from the cluster's DeviceClasses),
// and an object count (count/<resource>.<group>, and the
// legacy names configmaps, secrets, replicationcontrollers and resourcequotas) for every
// namespaced resource the API server serves, handed over by the shard as discovery finds
// it (Context.Served). Quota scopes (Terminating, NotTerminating, BestEffort,
// NotBestEffort, PriorityClass, CrossNamespacePodAffinity, VolumeAttributesClass) and
// scope selectors restrict which objects count, as upstream.
//
// A quota is synced when it is added, when its spec.hard changes, every
// --resource-quota-sync-period (all of the shard's quotas), and when an object it counts
// is deleted or changes in a way that changes what is counted (replenishment). A sync
// writes status with UpdateStatus only when something changed. A resource whose cache has
// not synced keeps its old usage and fails the sync, which is retried with backoff: only
// the quotas that need that resource wait, where upstream holds every quota until every
// resource has synced.
//
// Three queues, each worked by --concurrent-resource-quota-syncs workers: the
// controller's own queue for full recalculation (upstream's resourcequota_primary),
// resourcequota_priority for quotas whose status does not yet reflect their spec (until
// then admission refuses every create they cover), and resourcequota_replenishment,
// which upstream does not have (it replenishes through the primary queue): a periodic
// recalculation of many quotas cannot delay the release of usage (kubernetes#122483).
// When the shard starts working a namespace it queues each of its quotas on all three.
package resourcequota
