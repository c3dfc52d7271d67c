package controllers

import (
	"fmt"
	"sort"
	"strings"
)

// Names are one kube-controller-manager controller's two names, both of which its
// --controllers takes: Canonical ("replicaset-controller") and Alias ("replicaset", the
// name the flag took before kube-controller-manager gave its controllers canonical
// names; "" for a controller that never had another name). A kshard Descriptor's Name is
// the Alias where there is one, else the Canonical name.
type Names struct {
	Canonical string
	Alias     string
}

// String reads "replicaset-controller (alias replicaset)".
func (n Names) String() string {
	if n.Alias == "" {
		return n.Canonical
	}
	return n.Canonical + " (alias " + n.Alias + ")"
}

// kcmNames are kube-controller-manager 1.37's controllers: the canonical names of
// k8s.io/kubernetes cmd/kube-controller-manager/names (controller_names.go) and the
// aliases their descriptors in cmd/kube-controller-manager/app register (GetAliases, which
// upstream never removes), in the names package's order. kshard does not import
// k8s.io/kubernetes; TestNamesAreKubeControllerManagers checks the table against the
// local control plane's kube-controller-manager binary.
var kcmNames = []Names{
	{"serviceaccount-token-controller", "serviceaccount-token"},
	{"endpoints-controller", "endpoint"},
	{"endpointslice-controller", "endpointslice"},
	{"endpointslice-mirroring-controller", "endpointslicemirroring"},
	{"replicationcontroller-controller", "replicationcontroller"},
	{"pod-garbage-collector-controller", "podgc"},
	{"resourcequota-controller", "resourcequota"},
	{"namespace-controller", "namespace"},
	{"serviceaccount-controller", "serviceaccount"},
	{"garbage-collector-controller", "garbagecollector"},
	{"daemonset-controller", "daemonset"},
	{"job-controller", "job"},
	{"deployment-controller", "deployment"},
	{"replicaset-controller", "replicaset"},
	{"horizontal-pod-autoscaler-controller", "horizontalpodautoscaling"},
	{"disruption-controller", "disruption"},
	{"statefulset-controller", "statefulset"},
	{"cronjob-controller", "cronjob"},
	{"certificatesigningrequest-signing-controller", "csrsigning"},
	{"certificatesigningrequest-approving-controller", "csrapproving"},
	{"certificatesigningrequest-cleaner-controller", "csrcleaner"},
	{"podcertificaterequest-cleaner-controller", ""},
	{"ttl-controller", "ttl"},
	{"bootstrap-signer-controller", "bootstrapsigner"},
	{"token-cleaner-controller", "tokencleaner"},
	{"node-ipam-controller", "nodeipam"},
	{"node-lifecycle-controller", "nodelifecycle"},
	{"taint-eviction-controller", ""},
	{"device-taint-eviction-controller", ""},
	{"persistentvolume-binder-controller", "persistentvolume-binder"},
	{"persistentvolume-attach-detach-controller", "attachdetach"},
	{"persistentvolume-expander-controller", "persistentvolume-expander"},
	{"clusterrole-aggregation-controller", "clusterrole-aggregation"},
	{"persistentvolumeclaim-protection-controller", "pvc-protection"},
	{"persistentvolume-protection-controller", "pv-protection"},
	{"podgroup-protection-controller", ""},
	{"ttl-after-finished-controller", "ttl-after-finished"},
	{"root-ca-certificate-publisher-controller", "root-ca-cert-publisher"},
	{"kube-apiserver-serving-clustertrustbundle-publisher-controller", ""},
	{"ephemeral-volume-controller", "ephemeral-volume"},
	{"storageversion-garbage-collector-controller", "storage-version-gc"},
	{"resourceclaim-controller", "resource-claim-controller"},
	{"resourcepoolstatusrequest-controller", ""},
	{"legacy-serviceaccount-token-cleaner-controller", "legacy-service-account-token-cleaner"},
	{"validatingadmissionpolicy-status-controller", ""},
	{"volumeattributesclass-protection-controller", ""},
	{"service-cidr-controller", ""},
	{"storage-version-migrator-controller", "svm"},
	{"selinux-warning-controller", ""},
}

// NamesOf returns the names of the kube-controller-manager controller that name (its
// canonical name or its alias) names; false for a name kube-controller-manager does not
// know (kshard's test-only controllers, a typo).
func NamesOf(name string) (Names, bool) {
	if name == "" {
		return Names{}, false
	}
	for _, n := range kcmNames {
		if name == n.Canonical || name == n.Alias {
			return n, true
		}
	}
	return Names{}, false
}

// SameController reports whether a and b name one controller: they are equal, or are the
// canonical name and the alias of one of kube-controller-manager's.
func SameController(a, b string) bool {
	if a == b {
		return true
	}
	n, ok := NamesOf(a)
	return ok && (b == n.Canonical || b == n.Alias)
}

// displayNames renders kshard's names of controllers with both of kube-controller-manager's
// names where it has them, sorted: "cronjob-controller (alias cronjob), …".
func displayNames(names []string) string {
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = name
		if n, ok := NamesOf(name); ok {
			out[i] = n.String()
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// notImplemented explains the entries of bad that name a kube-controller-manager
// controller kshard does not implement.
func notImplemented(bad []string) string {
	var out []string
	for _, e := range bad {
		if n, ok := NamesOf(strings.TrimPrefix(e, "-")); ok {
			out = append(out, fmt.Sprintf("; %q is kube-controller-manager's %s, which kshard does not implement", e, n))
		}
	}
	return strings.Join(out, "")
}
