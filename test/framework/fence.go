package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// CoordinatorServiceAccount is the ServiceAccount (in the shards' namespace) the
// coordinators of a KShard with Fence act as: the fence's record guard lets only it change
// the owner record (the partition label, the owner Roles), and it nothing else on a
// Namespace or in RBAC, so the coordinators may not run as the administrator, who must
// stay free to manage namespaces.
const CoordinatorServiceAccount = "kshard-coordinator"

// installFence installs the server-side fence for this KShard's shard ServiceAccount, as
// the chart does (the policies and bindings named after the KShard, reading a partition
// label of its own, and the probe user's RBAC), and removes it when the test ends (first
// the bindings, so that no moment refuses writes the test does not expect), then the
// label from every namespace. The owner Roles live in the KShard's namespace and go with
// it. The coordinators act as CoordinatorServiceAccount (an administrator's kubeconfig
// impersonating it; bound to cluster-admin, the record guard limits it on Namespaces and
// on RBAC in its namespace all the same).
func (k *KShard) installFence(suffix string) {
	k.t.Helper()
	ns := k.pods.namespace
	p := ownerrecord.PolicyParams{
		Name:           "kshard-e2e-fence-" + k.f.RunID + "-" + suffix,
		Namespace:      ns,
		ServiceAccount: ShardServiceAccount,
		// A label of this KShard's own: another test's KShard may have another partition
		// count.
		PartitionLabel:   "e2e-" + k.f.RunID + "-" + suffix + ".kshard.io/partition",
		ClusterPartition: k.PartitionOf(partition.ClusterKey),
		CoordinatorUser:  ownerrecord.ServiceAccountUser(ns, CoordinatorServiceAccount),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k.coordinatorKubeconfig = k.f.ImpersonatingKubeconfig(k.t, ns, CoordinatorServiceAccount, "cluster-admin")
	if err := ownerrecord.Install(ctx, k.f.Client, p); err != nil {
		k.t.Fatalf("installing the shard fence: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := ownerrecord.Uninstall(ctx, k.f.Client, p); err != nil {
			k.t.Errorf("removing the shard fence: %v", err)
		}
		nss, err := k.f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: p.PartitionLabel})
		if err != nil {
			k.t.Errorf("listing namespaces with %s: %v", p.PartitionLabel, err)
			return
		}
		// The API server applies the record guard until its informer has seen the
		// binding go: a removal refused by the guard a moment after Uninstall is retried.
		// Namespaces being deleted are left alone, and a benchmark's thousands are
		// patched 16 at a time.
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, p.PartitionLabel)
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for _, ns := range nss.Items {
			if ns.DeletionTimestamp != nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				var last error
				err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					_, last = k.f.Client.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
					return last == nil || apierrors.IsNotFound(last), nil
				})
				if err != nil {
					k.t.Errorf("removing %s from namespace %s: %v", p.PartitionLabel, ns.Name, last)
				}
			}()
		}
		wg.Wait()
	})
	k.fence = &p
}

// ImpersonatingKubeconfig creates ServiceAccount namespace/sa, binds it to clusterRole
// (cluster-wide), and writes a kubeconfig in which the administrator's credentials act as
// that ServiceAccount (the kubeconfig's as: field): a process run with it is that
// ServiceAccount to RBAC and admission, without a token that expires. The binding is
// deleted when the test ends (the ServiceAccount goes with its namespace); the call
// returns once the binding is in force.
func (f *Framework) ImpersonatingKubeconfig(t testing.TB, namespace, sa, clusterRole string) string {
	t.Helper()
	ctx := context.Background()
	_, err := f.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, sa, err)
	}
	name := "kshard-e2e-" + namespace + "-" + sa
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: f.RunID}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
	}
	if _, err := f.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", name, err)
	}
	t.Cleanup(func() {
		deleteIgnoringNotFound(t, "ClusterRoleBinding "+name, f.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	user := ownerrecord.ServiceAccountUser(namespace, sa)
	Eventually(t, 30*time.Second, user+"'s ClusterRoleBinding is in force", func(ctx context.Context) (bool, error) {
		r, err := f.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Resource: "namespaces", Verb: "list"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})
	cfg, err := clientcmd.LoadFromFile(f.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// CoordinatorRESTConfig returns the administrator's client configuration acting as the
// coordinators' identity (CoordinatorServiceAccount), nil without Fence: the only user the
// fence's record guard lets change the owner record (owner Roles, the term beacon, the
// partition labels), so a test that forges a term or an owner (a deposed leader's late
// write, say) must write as it.
func (k *KShard) CoordinatorRESTConfig() *rest.Config {
	if k.fence == nil {
		return nil
	}
	cfg := rest.CopyConfig(k.f.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: k.fence.CoordinatorUser}
	return cfg
}

// DeleteFenceBinding deletes the binding of the fence policy (Binding), the fault a shard
// with the namespace controller's rights or a careless operator can cause and that no
// admission policy can prevent, and returns the function that puts it back. The
// coordinators' Checker reports it (kshard_fence_enforced 0, a FenceNotEnforced Event).
func (k *KShard) DeleteFenceBinding(ctx context.Context) (restore func(context.Context) error, err error) {
	if k.fence == nil {
		return nil, fmt.Errorf("the KShard has no fence (KShardOptions.Fence)")
	}
	b := ownerrecord.Binding(*k.fence)
	bindings := k.f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if err := bindings.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("deleting the fence binding %s: %w", b.Name, err)
	}
	return func(ctx context.Context) error {
		_, err := bindings.Create(ctx, b, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("restoring the fence binding %s: %w", b.Name, err)
		}
		return nil
	}, nil
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
// owner record itself): always valid, as no other leader writes the test's owner record.
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

// PartitionOf returns the partition of namespace ns for this KShard's partition count, as
// the fence's partition label and the owner Roles spell it.
func (k *KShard) PartitionOf(ns string) string {
	pm, err := partition.NewMap(k.opts.Partitions)
	if err != nil {
		k.t.Fatal(err)
	}
	return strconv.FormatUint(uint64(pm.For(ns)), 10)
}

// RecordOwners returns the shards whose owner Roles in namespace (kshard's) grant
// partition, read from the API server and sorted: one live shard for a namespace whose
// partition is owned, none for one nobody owns, several never.
func RecordOwners(ctx context.Context, client kubernetes.Interface, namespace, partition string) ([]string, error) {
	roles, err := client.RbacV1().Roles(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var owners []string
	for _, r := range roles.Items {
		shard, ok := strings.CutPrefix(r.Name, ownerrecord.OwnerRolePrefix)
		if !ok {
			continue
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.ResourceNames, partition) {
				owners = append(owners, shard)
				break
			}
		}
	}
	slices.Sort(owners)
	return owners, nil
}
