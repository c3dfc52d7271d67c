// Package framework connects integration tests to kshard's real local control plane
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok on loopback,
// managed by hack/cluster.sh).
//
// A test package calls framework.Main from TestMain. Main reuses a control plane that is
// already up or starts one, and fails the whole package when it cannot: an integration
// test never passes silently without a cluster. Setting KSHARD_SKIP_INTEGRATION=1 skips
// the package on purpose, and says so.
//
// Each test asks for its own namespaces (Framework.Namespace); they carry the label
// kshard.io/e2e-run and are deleted when the test ends.
package framework
