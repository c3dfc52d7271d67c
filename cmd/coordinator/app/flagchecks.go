package app

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/sharding/shardauth"
)

// Lower bounds of durations that are accepted as positive but would make the
// coordinator busy-loop or never succeed.
const (
	// MinHeartbeatInterval is the least --heartbeat-interval. Every heartbeat of every
	// shard walks the state machine under the coordinator's lock and is answered; at
	// 100ms a fleet of 1000 shards already sends 10,000 a second. 1ns would make each
	// shard send as fast as it can.
	MinHeartbeatInterval = 100 * time.Millisecond
	// MinFenceProbeTimeout is the least --shard-fence-probe-timeout and
	// --shard-fence-write-timeout. Enforcement takes
	// the API server's RBAC informers seeing the new owner Roles, access reviews and two dry-run probes:
	// below a second every batch would time out and be retried forever, and no partition
	// would be granted.
	MinFenceProbeTimeout = time.Second
)

// reservedLabelDomains are the label prefixes Kubernetes reserves for its own components
// (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set):
// kubernetes.io/ and k8s.io/ and every subdomain of them (pod-security.kubernetes.io,
// node-role.kubernetes.io, ...). A partition label there can collide with what Kubernetes
// itself writes or enforces (Pod Security's labels decide which pods a namespace admits),
// and a policy that lets the coordinator patch it lets it patch theirs.
var reservedLabelDomains = []string{"kubernetes.io", "k8s.io"}

// validatePartitionLabel refuses a partition label key in a reserved prefix.
func validatePartitionLabel(key string) error {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return nil // no prefix: the API server's own syntax check applies (PolicyParams.Validate)
	}
	prefix = strings.ToLower(prefix)
	for _, d := range reservedLabelDomains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return fmt.Errorf("--shard-fence-partition-label=%q: the prefix %q is reserved for Kubernetes (%s/ and *.%s/): use a domain of your own, e.g. the default %q",
				key, prefix, d, d, NewFenceOptions().PartitionLabel)
		}
	}
	return nil
}

// wellKnownAPIAudiences are the audiences API servers commonly accept for ServiceAccount
// tokens (--api-audiences, which defaults to --service-account-issuer): kubeadm, kind,
// EKS and most distributions use the in-cluster service URL; k3s and RKE2 add their own
// names. A shard token issued for any of them is also a token for the API server, so a
// coordinator (or anyone it is shown to) could use it as the shard against the cluster.
// The coordinator also refuses the audiences of its own ServiceAccount token, the API
// server's whatever they are (checkAPIAudience).
var wellKnownAPIAudiences = []string{
	"https://kubernetes.default.svc",
	"https://kubernetes.default.svc.cluster.local",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
	"https://kubernetes.default",
	"kubernetes",
	"k3s",
	"rke2",
}

// normalAudience compares audiences as the same URL or name.
func normalAudience(a string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(a)), "/")
}

// validateAudience refuses a --shard-token-audience the API server accepts by default.
func validateAudience(audience string) error {
	if slices.Contains(wellKnownAPIAudiences, normalAudience(audience)) {
		return fmt.Errorf("--shard-token-audience=%q is an audience the Kubernetes API server accepts: a shard token for it would also authenticate the shard to the API server; "+
			"use an audience of the coordinator's own (default %q)", audience, shardauth.DefaultAudience)
	}
	return nil
}

// checkAPIAudience refuses --shard-token-audience when it is an audience of the
// coordinator's own client token (in a cluster, its ServiceAccount token, issued for the
// API server's audiences): then a shard token would be an API server token as well.
// Tokens that are not JWTs (a kubeconfig's static token) say nothing and pass.
func checkAPIAudience(cfg *rest.Config, audience string) error {
	tok := cfg.BearerToken
	if tok == "" && cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return nil // the client itself reports an unreadable token
		}
		tok = strings.TrimSpace(string(b))
	}
	auds, ok := shardauth.Audiences(tok)
	if !ok {
		return nil
	}
	for _, a := range auds {
		if normalAudience(a) == normalAudience(audience) {
			return fmt.Errorf("--shard-token-audience=%q is an audience of the API server (the coordinator's own token is issued for %q): "+
				"a shard token for it would also authenticate the shard to the API server; use an audience of the coordinator's own (default %q)",
				audience, auds, shardauth.DefaultAudience)
		}
	}
	return nil
}
