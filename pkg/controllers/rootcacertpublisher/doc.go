// Package rootcacertpublisher is kshard's root CA certificate publisher
// ("root-ca-cert-publisher"), equal in behaviour to kube-controller-manager 1.37's: every
// namespace has a ConfigMap "kube-root-ca.crt" whose key "ca.crt" holds the CA bundle
// that verifies the API server, and whose "kubernetes.io/description" annotation says
// what it is for. Pods read it through the projected volume the ServiceAccount admission
// plugin adds to them.
//
// The bundle is the file named by --root-ca-file (kube-controller-manager's flag, checked
// at startup: it must be readable and hold at least one PEM certificate); without the flag
// it is the CA the shard's own client trusts for the API server (controllers.Context's
// APIServerCA), as kube-controller-manager falls back to its client configuration's CA.
//
// Its queue holds namespace names. A namespace is queued when it is added, when it is
// updated while Active, and when its kube-root-ca.crt is updated or deleted. The sync
// creates the ConfigMap when the cache does not hold it (the API server's refusal because
// the namespace is gone or terminating ends the attempt, as upstream's does), and puts
// its data and annotation back when they differ: data other than ca.crt is dropped, other
// annotations, labels and binaryData are kept. Like upstream's, the controller records no
// events; it exports upstream's root_ca_cert_publisher_sync_total and
// root_ca_cert_publisher_sync_duration_seconds.
//
// It keeps nothing in memory: when a namespace moves to another shard, the new owner
// queues it (its primary resource is namespaces) and the sync repairs what needs it.
package rootcacertpublisher
