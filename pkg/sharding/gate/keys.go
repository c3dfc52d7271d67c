package gate

// Which partition a queue key belongs to: the policy every queue of a shard follows. It
// keeps:
//   - A namespaced key ("namespace/name") belongs to its namespace's partition.
//   - A key without a namespace belongs to the cluster partition (cluster-scoped work), or
//     to the partition of the namespace it names (a queue of Namespace objects), or to no
//     partition (a queue of namespaced objects only): which, KeysFor decides from the
//     queue's primary resources, and a queue that mixes Namespaces with another
//     cluster-scoped type is refused, since its bare keys could not be told apart.
//   - A key that maps to no partition is never admitted or started.

import (
	"fmt"
	"strings"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// KeyPartition maps a queue key to the partition that owns it. It returns ok=false for a
// key it cannot map (malformed key); such keys are never admitted or started, because
// work whose owner is unknown could be owned by another shard.
//
// It is a function type so that this package does not depend on how kshard hashes names;
// the shard passes the real mapping in. It must be pure and cheap: it is called on every
// Add and Get, outside the Gate's lock.
type KeyPartition func(key string) (p partition.ID, ok bool)

// ObjectKeys adapts a namespace → partition function to queue keys of objects, in
// client-go's cache.MetaNamespaceKeyFunc form. A namespaced key "namespace/name" maps by
// its namespace. A key without a slash is a cluster-scoped object's name: cluster-scoped
// work belongs to the cluster partition, ofNamespace(partition.ClusterKey), so exactly one
// shard works it at a time. Empty or otherwise malformed keys map to ok=false.
func ObjectKeys(ofNamespace func(namespace string) partition.ID) KeyPartition {
	return keyPartition(ofNamespace, func(string) string { return partition.ClusterKey })
}

// NamespaceNameKeys is ObjectKeys for queues whose keys without a slash are namespace
// names (a Namespace object's key, or per-namespace work such as a service account
// controller's): such a key belongs to the partition of the namespace it names.
func NamespaceNameKeys(ofNamespace func(namespace string) partition.ID) KeyPartition {
	return keyPartition(ofNamespace, func(name string) string { return name })
}

// NamespacedKeys is ObjectKeys for queues that hold only namespaced keys (their primary
// resources are all namespaced): a key without a namespace maps to no partition, so it
// is dropped (and counted) instead of becoming cluster-scoped work by mistake.
func NamespacedKeys(ofNamespace func(namespace string) partition.ID) KeyPartition {
	objects := ObjectKeys(ofNamespace)
	return func(key string) (partition.ID, bool) {
		if !strings.Contains(key, "/") {
			return 0, false
		}
		return objects(key)
	}
}

func keyPartition(ofNamespace func(string) partition.ID, unnamespaced func(name string) string) KeyPartition {
	return func(key string) (partition.ID, bool) {
		ns, name, namespaced := strings.Cut(key, "/")
		if !namespaced {
			if key == "" {
				return 0, false
			}
			return ofNamespace(unnamespaced(key)), true
		}
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return 0, false
		}
		return ofNamespace(ns), true
	}
}

// Primary describes one of the resources whose objects' keys a queue holds (a
// controller's primary resources), as far as the mapping of its keys goes.
type Primary struct {
	// Name names the resource in errors.
	Name string
	// Namespaces: the resource is the Namespace objects, whose keys are namespace names.
	Namespaces bool
	// ClusterScoped: the resource is cluster-scoped (a key is the object's name alone).
	ClusterScoped bool
}

// KeysFor returns how the keys of a queue whose primary resources are primaries map to
// partitions, namespaces mapping to theirs by ofNamespace. A key without a namespace is
// a namespace name when Namespaces are among the primaries (NamespaceNameKeys),
// cluster-scoped work (the cluster partition) when another cluster-scoped type is
// (ObjectKeys), and refused when all primaries are namespaced (NamespacedKeys).
// Namespaces together with another cluster-scoped type are an error: their keys (names
// without a namespace) cannot be told apart in one queue.
func KeysFor(ofNamespace func(namespace string) partition.ID, primaries []Primary) (KeyPartition, error) {
	namespaces, clusterScoped := false, []string{}
	for _, p := range primaries {
		switch {
		case p.Namespaces:
			namespaces = true
		case p.ClusterScoped:
			clusterScoped = append(clusterScoped, p.Name)
		}
	}
	if namespaces && len(clusterScoped) > 0 {
		return nil, fmt.Errorf("its primary resources mix namespaces with cluster-scoped %v: their keys (names without a namespace) cannot be told apart in one queue", clusterScoped)
	}
	switch {
	case namespaces:
		return NamespaceNameKeys(ofNamespace), nil
	case len(clusterScoped) > 0:
		return ObjectKeys(ofNamespace), nil
	default:
		// Only namespaced primaries: a key without a namespace is a mistake (namespace
		// names need namespaces among the primaries), never cluster-scoped work.
		return NamespacedKeys(ofNamespace), nil
	}
}
