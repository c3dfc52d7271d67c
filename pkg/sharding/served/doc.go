// Package served finds the resources the API server serves, for the controllers that act
// on every resource rather than on a list fixed in their descriptor (the garbage
// collector, ResourceQuota): which resources a consumer wants (Spec: the verbs they must
// support, scope, an ignore list), found by discovery in the API server's preferred
// version of each group (Discover), and how that set changes from one discovery to the
// next (Tracker), so that the shard starts informers for resources that appear (a CRD
// created, an aggregated API registered) and stops those of resources that are gone.
//
// It keeps upstream kube-controller-manager's rules: a group whose discovery fails keeps
// the resources it had (its informers are not stopped because its API server did not
// answer once), and a discovery that fails as a whole changes nothing.
//
// Loop is the shard's discovery loop: one discovery per round (upstream's period is
// 30 s) for every Consumer, informers asked of the shard's cache once per resource and
// removed once no consumer wants it, and each consumer's Subscriber told of what appeared
// and what is gone. It does no I/O of its own beyond the discovery client and the
// Informers it is handed; Run is its only goroutine.
//
// The shard wires it in cmd/shard/app/served.go: one Consumer per enabled controller whose
// Descriptor sets Served, Informers from the shard's cache (typed where another controller
// reads the resource typed; metadata-only otherwise, optional unless of the API server's
// own groups). docs/architecture.md, "Controllers of every served resource", tells the
// whole path.
package served
