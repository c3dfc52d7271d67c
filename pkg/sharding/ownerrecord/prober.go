package ownerrecord

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ProbeEventReason is the reason of the dry-run Event a probe sends (never stored).
const ProbeEventReason = "KShardFenceProbe"

// Prober finds out what the API server's admission currently decides for a shard in a
// namespace, by sending a server-side dry-run write as that shard and reading the
// answer. Writing an owner Role (Labeler.Set) returns once etcd has it; the API server
// enforces it only when its RBAC informers have seen the write, a moment later. A move is
// safe only once the new Role is enforced: Fence.Apply reviews and probes before the
// coordinator sends Acquire.
//
// The probe is a dry-run create of a core/v1 Event sent as the probe user
// (ProbeClient): a dry run stores nothing, the policy matches events of dry-run requests
// only (real events are not fenced) and judges the probe user as the shard it names, and
// the probe user may create nothing else. Admission is per API server: with several kube-apiservers
// behind a load balancer a probe shows what the one it reached enforces.
type Prober struct {
	// PolicyName is the fence policy's name (DefaultPolicyName when empty), used to tell
	// its refusals from other errors.
	PolicyName string
	// Interval between probes (default 5ms: admission catches up in milliseconds, and a
	// probe is one cheap request).
	Interval time.Duration
}

// ProbeClient returns the client the enforcement probe sends its dry runs with for shard
// ID shard: it impersonates the probe user (PolicyParams.ProbeUser) with the pod-name
// extra shard, which the fence policy judges exactly as it judges that shard's own
// pod-bound token, and which may do nothing but a dry-run Event create (its RBAC,
// ProbeClusterRole, and LimitsPolicy). base must be allowed to impersonate that user
// (impersonate on users, resourceName the probe user) and the extra (impersonate on
// userextras/authentication.kubernetes.io/pod-name); it need not, and in the chart may
// not, impersonate the shard ServiceAccount. The client is not rate limited: probes are
// few, short and bounded by their context.
func ProbeClient(base *rest.Config, params PolicyParams, shard string) (kubernetes.Interface, error) {
	return impersonating(base, params.ProbeUser(), shard, "kshard-fence-probe")
}

// ShardClient returns a client that acts as shard ID shard of the ServiceAccount named
// by params, by impersonation: user system:serviceaccount:<ns>:<sa> with the pod-name
// extra, what the shard's own pod-bound token authenticates as (without the token's
// other extras). For tests and tools run by an administrator: the coordinator probes with
// ProbeClient and may not impersonate the shards.
func ShardClient(base *rest.Config, params PolicyParams, shard string) (kubernetes.Interface, error) {
	return impersonating(base, params.Username(), shard, "kshard-shard-impersonation")
}

// impersonating returns a client of base acting as user with the pod-name extra shard.
func impersonating(base *rest.Config, user, shard, agent string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Extra:    map[string][]string{PodNameExtra: {shard}},
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = agent
	return kubernetes.NewForConfig(cfg)
}

// Allowed sends one probe as client in namespace: true when admission lets it through,
// false when the fence refuses it, an error otherwise (RBAC, network, a namespace that
// does not exist).
func (p Prober) Allowed(ctx context.Context, client kubernetes.Interface, namespace string) (bool, error) {
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kshard-fence-probe-", Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "ConfigMap", Namespace: namespace, Name: "kshard-fence-probe",
		},
		Reason:  ProbeEventReason,
		Message: "dry-run probe of the kshard shard fence; never stored",
		Type:    corev1.EventTypeNormal,
		Source:  corev1.EventSource{Component: "kshard-fence-probe"},
	}
	_, err := client.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return true, nil
	case IsRefusal(err, p.PolicyName):
		return false, nil
	default:
		return false, err
	}
}

// WaitAllowed probes until admission lets client write in namespace, and returns how
// long that took (at most one probe's round trip when the first probe passed) and the
// number of probes sent.
func (p Prober) WaitAllowed(ctx context.Context, client kubernetes.Interface, namespace string) (time.Duration, int, error) {
	return p.waitFor(ctx, namespace, func(ctx context.Context) (bool, error) { return p.Allowed(ctx, client, namespace) })
}

// WaitEnforced probes until admission lets owner write in namespace and refuses
// sentinel there in the same round, and returns how long that took and the number of
// probes sent. An allowed probe alone proves nothing when the policy is not in force;
// the refused sentinel proves it is. A nil owner (the namespace has no owner any more)
// only waits for the sentinel's refusal.
func (p Prober) WaitEnforced(ctx context.Context, owner, sentinel kubernetes.Interface, namespace string) (time.Duration, int, error) {
	return p.waitFor(ctx, namespace, func(ctx context.Context) (bool, error) {
		if owner != nil {
			if ok, err := p.Allowed(ctx, owner, namespace); err != nil || !ok {
				return false, err
			}
		}
		ok, err := p.Allowed(ctx, sentinel, namespace)
		return !ok, err
	})
}

// waitFor polls round every Interval until it reports done, an error, or ctx ends.
func (p Prober) waitFor(ctx context.Context, namespace string, round func(context.Context) (bool, error)) (time.Duration, int, error) {
	interval := p.Interval
	if interval <= 0 {
		interval = 5 * time.Millisecond
	}
	start, n := time.Now(), 0
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		n++
		return round(ctx)
	})
	if err != nil {
		return time.Since(start), n, fmt.Errorf("fence probe in namespace %s, %d rounds: %w", namespace, n, err)
	}
	return time.Since(start), n, nil
}
