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
// It does no I/O of its own beyond the discovery call it is handed, and starts no
// goroutine: the shard runs the discovery loop and acts on Tracker's answers.
package served
