package framework

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
)

// installFence installs the server-side fence for this KShard's shard ServiceAccount, as
// the chart does (a policy and binding named after the KShard, reading an owner label of
// its own), and removes it when the test ends (first the binding, so that no moment
// refuses writes the test does not expect), then the label from every namespace.
func (k *KShard) installFence(suffix string) {
	k.t.Helper()
	p := ownerrecord.PolicyParams{
		Name:           "kshard-e2e-fence-" + k.f.RunID + "-" + suffix,
		Namespace:      k.pods.namespace,
		ServiceAccount: ShardServiceAccount,
		// A label of this KShard's own: another test's coordinator (of another term
		// sequence) must not find it on the namespaces.
		OwnerLabel: "e2e-" + k.f.RunID + "-" + suffix + ".kshard.io/owner",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ownerrecord.Install(ctx, k.f.Client, p); err != nil {
		k.t.Fatalf("installing the shard fence: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ownerrecord.Uninstall(ctx, k.f.Client, p); err != nil {
			k.t.Errorf("removing the shard fence: %v", err)
		}
		nss, err := k.f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: p.OwnerLabel})
		if err != nil {
			k.t.Errorf("listing namespaces with %s: %v", p.OwnerLabel, err)
			return
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`, p.OwnerLabel, p.TermAnnotation())
		for _, ns := range nss.Items {
			_, err := k.f.Client.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				k.t.Errorf("removing %s from namespace %s: %v", p.OwnerLabel, ns.Name, err)
			}
		}
	})
	k.fence = &p
}

// FenceParams returns the fence's names (nil without KShardOptions.Fence).
func (k *KShard) FenceParams() *ownerrecord.PolicyParams { return k.fence }

// FenceDenials reads the API server's count of the writes the fence policy named policy
// refused (apiserver_validating_admission_policy_check_total{enforcement_action="deny"}).
// The counter restarts with the API server.
func (f *Framework) FenceDenials(ctx context.Context, policy string) (float64, error) {
	raw, err := f.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return ParseMetrics(string(raw)).Value("apiserver_validating_admission_policy_check_total",
		`policy="`+policy+`"`, `enforcement_action="deny"`), nil
}

// DryRunPodCreate creates a Pod in namespace as client without storing it (a shard may
// create pods: the ReplicaSet controller does): what the fence decides for a real write of
// that client there.
func DryRunPodCreate(ctx context.Context, client kubernetes.Interface, namespace string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-check-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/fence-check:1"}}}}
	_, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// CertainTenure is the tenure of a test that plays the coordinator leader (writes the
// owner record itself): always valid, as no other leader writes the test's owner label.
type CertainTenure struct{}

// Valid reports true.
func (CertainTenure) Valid() bool { return true }

// WaitFenceEnforced waits until the API server enforces the fence again (after its
// binding was put back): a dry-run write as the sentinel shard, which no owner record
// names, is refused in the shards' own namespace.
func (k *KShard) WaitFenceEnforced(ctx context.Context) error {
	if k.fence == nil {
		return fmt.Errorf("no fence: KShardOptions.Fence is off")
	}
	sentinel, err := ownerrecord.ShardClient(k.f.Config, *k.fence, ownerrecord.SentinelShard)
	if err != nil {
		return err
	}
	_, _, err = ownerrecord.Prober{PolicyName: k.fence.Name}.WaitEnforced(ctx, nil, sentinel, k.pods.namespace)
	return err
}
