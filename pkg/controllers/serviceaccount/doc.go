// Package serviceaccount is kshard's ServiceAccount controller ("serviceaccount"), equal in
// behaviour to kube-controller-manager 1.37's: every active namespace has a ServiceAccount
// named "default", created when the namespace appears and re-created when it is deleted.
// Pods need it: the ServiceAccount admission plugin refuses a pod whose ServiceAccount does
// not exist, and a pod that names none gets "default".
//
// Its queue holds namespace names. A namespace is queued when it is added or updated and
// when a "default" ServiceAccount in it is deleted. The sync reads the namespace from the
// cache and does nothing unless its phase is Active (a terminating namespace gets nothing
// new); it creates the missing ServiceAccount, with nothing but its name, and takes the
// API server's AlreadyExists, and its refusal because the namespace began terminating
// meanwhile, as success. Like upstream's, the controller records no events.
//
// It keeps nothing in memory: when a namespace moves to another shard, the new owner
// queues it (its primary resource is namespaces) and the sync puts back whatever is
// missing.
package serviceaccount
