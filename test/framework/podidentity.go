package framework

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	shardapp "github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
)

// ShardServiceAccount is the ServiceAccount whose pod-bound tokens the shards of a KShard
// with PodIdentity authenticate with, in the KShard's own namespace (KShard.PodNamespace).
const ShardServiceAccount = "kshard-shard"

// Annotation and value that mark the fake (kwok) nodes of the local control plane
// (hack/cluster.sh); a shard's pod is bound to one of them.
const (
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	kwokNodeValue      = "fake"
)

// shardTokenTTL is how long the shards' tokens are valid: longer than any test.
const shardTokenTTL = time.Hour

// ShardCredentials are what a shard process authenticates with.
type ShardCredentials struct {
	// Kubeconfig is the shard's --kubeconfig; empty means the admin kubeconfig.
	Kubeconfig string
	// CoordinatorTokenFile is the shard's --coordinator-token-file; empty passes none.
	CoordinatorTokenFile string
}

// ShardIdentity is a shard's pod and the credentials bound to it, as a shard pod in a
// cluster has them: a pod named after the shard ID, run by ShardServiceAccount, and two
// tokens bound to that pod (they stop working when the pod is deleted).
type ShardIdentity struct {
	// Pod is the pod's name: the shard ID.
	Pod  string
	UID  types.UID
	Node string
	// APIToken is the pod-bound token for the API server (its default audiences).
	APIToken string
	// CoordinatorToken is the pod-bound token for the coordinator's --shard-token-audience.
	CoordinatorToken string
	// Kubeconfig (server and CA of the admin kubeconfig, user APIToken) and
	// CoordinatorTokenFile (CoordinatorToken) are files in the test's temporary folder.
	Kubeconfig           string
	CoordinatorTokenFile string
}

// Credentials returns the files a shard process is started with.
func (id ShardIdentity) Credentials() ShardCredentials {
	return ShardCredentials{Kubeconfig: id.Kubeconfig, CoordinatorTokenFile: id.CoordinatorTokenFile}
}

// podIdentity holds the cluster objects of a KShard with PodIdentity.
type podIdentity struct {
	namespace   string
	clusterRole string // also the ClusterRoleBinding's name
	audience    string
	dir         string
	rules       []rbacv1.PolicyRule

	mu     sync.Mutex
	nodes  []string
	shards map[string]*ShardIdentity
}

// setupPodIdentity creates the KShard's namespace, ShardServiceAccount and a ClusterRole
// (with its binding) granting that ServiceAccount what a shard needs, and waits until the
// API server's authorizer allows every one of those needs. Everything is deleted when the
// test ends.
func (k *KShard) setupPodIdentity(suffix string) {
	t := k.t
	t.Helper()
	ctx := context.Background()
	p := &podIdentity{
		namespace:   "kshard-" + k.f.RunID + "-" + suffix,
		audience:    flagValue(k.opts.CoordinatorArgs, "--shard-token-audience", shardauth.DefaultAudience),
		dir:         t.TempDir(),
		shards:      map[string]*ShardIdentity{},
		clusterRole: "kshard-e2e-shard-" + k.f.RunID + "-" + suffix,
	}
	needs := shardNeeds(k.opts.ShardPermissions)
	p.rules = policyRules(needs)
	labels := map[string]string{RunLabel: k.f.RunID}
	c := k.f.Client

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace, Labels: labels}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the shards' namespace: %v", err)
	}
	t.Cleanup(func() { k.f.DeleteNamespace(t, p.namespace) })
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ShardServiceAccount, Labels: labels}}
	if _, err := c.CoreV1().ServiceAccounts(p.namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", p.namespace, ShardServiceAccount, err)
	}

	// Cluster-wide rules only, as the chart's shard ClusterRole: the shard needs no
	// namespaced Role of its own (it holds no Lease; its events go to the objects'
	// namespaces).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: p.clusterRole, Labels: labels}, Rules: p.rules}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", p.clusterRole, err)
	}
	t.Cleanup(func() {
		deleteIgnoringNotFound(t, "ClusterRole "+p.clusterRole, c.RbacV1().ClusterRoles().Delete(ctx, p.clusterRole, metav1.DeleteOptions{}))
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: p.clusterRole, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: p.clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ShardServiceAccount, Namespace: p.namespace}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", p.clusterRole, err)
	}
	t.Cleanup(func() {
		deleteIgnoringNotFound(t, "ClusterRoleBinding "+p.clusterRole, c.RbacV1().ClusterRoleBindings().Delete(ctx, p.clusterRole, metav1.DeleteOptions{}))
	})

	// The RBAC authorizer sees new bindings through its informers, a moment later; a
	// shard started before would fail its own permission check.
	user := shardauth.ServiceAccountUser(p.namespace, ShardServiceAccount)
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + p.namespace, "system:authenticated"}
	Eventually(t, 30*time.Second, "the shard ServiceAccount's permissions are in effect", func(ctx context.Context) (bool, error) {
		for _, n := range needs {
			resource, sub, _ := strings.Cut(n.Resource, "/")
			r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: n.Group, Resource: resource, Subresource: sub, Verb: n.Verb},
			}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !r.Status.Allowed {
				return false, fmt.Errorf("%s not yet allowed %s", user, n)
			}
		}
		return true, nil
	})
	k.pods = p
}

// shardNeeds is what a shard needs whatever its --controllers: the shard's own
// permissions and those of every controller the shard command registers (a superset of
// any selection), plus a test's extra ones.
func shardNeeds(extra []controllers.Permission) []shardapp.Need {
	needs := shardapp.RequiredPermissions(shardapp.Descriptors())
	for _, p := range extra {
		for _, v := range p.Verbs {
			needs = append(needs, shardapp.Need{Owner: "test", Group: p.Group, Resource: p.Resource, Verb: v})
		}
	}
	return needs
}

// policyRules turns needs into one rule per group and resource, sorted.
func policyRules(needs []shardapp.Need) []rbacv1.PolicyRule {
	type gr struct{ group, resource string }
	verbs := map[gr]map[string]bool{}
	for _, n := range needs {
		k := gr{n.Group, n.Resource}
		if verbs[k] == nil {
			verbs[k] = map[string]bool{}
		}
		verbs[k][n.Verb] = true
	}
	keys := make([]gr, 0, len(verbs))
	for k := range verbs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].resource < keys[j].resource
	})
	rules := make([]rbacv1.PolicyRule, 0, len(keys))
	for _, k := range keys {
		vs := make([]string, 0, len(verbs[k]))
		for v := range verbs[k] {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: vs})
	}
	return rules
}

// flagValue returns the last value of flag in args ("--flag value" or "--flag=value"),
// or def.
func flagValue(args []string, flag, def string) string {
	v := def
	for i, a := range args {
		switch {
		case a == flag && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, flag+"="):
			v = strings.TrimPrefix(a, flag+"=")
		}
	}
	return v
}

func deleteIgnoringNotFound(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s: %v", what, err)
	}
}

// PodNamespace is the namespace of the shards' pods and ServiceAccount; "" without
// PodIdentity.
func (k *KShard) PodNamespace() string {
	if k.pods == nil {
		return ""
	}
	return k.pods.namespace
}

// ServiceAccount is the shards' ServiceAccount name (in PodNamespace); "" without
// PodIdentity.
func (k *KShard) ServiceAccount() string {
	if k.pods == nil {
		return ""
	}
	return ShardServiceAccount
}

// ShardIdentity returns the pod and credentials of shard id, creating them (the pod, then
// fresh tokens bound to it) when the shard has none yet. It fails the test without
// PodIdentity.
func (k *KShard) ShardIdentity(id string) ShardIdentity {
	k.t.Helper()
	if k.pods == nil {
		k.t.Fatalf("ShardIdentity(%q): the KShard was made without PodIdentity", id)
	}
	k.pods.mu.Lock()
	defer k.pods.mu.Unlock()
	if s, ok := k.pods.shards[id]; ok {
		return *s
	}
	s, err := k.newShardIdentity(context.Background(), id)
	if err != nil {
		k.t.Fatalf("pod identity of shard %s: %v", id, err)
	}
	k.pods.shards[id] = s
	return *s
}

// ShardRESTConfig returns a REST config that authenticates as shard id's pod-bound
// ServiceAccount token (creating its pod if needed), e.g. to see what the API server lets
// that shard do.
func (k *KShard) ShardRESTConfig(id string) *rest.Config {
	k.t.Helper()
	s := k.ShardIdentity(id)
	cfg := rest.AnonymousClientConfig(k.f.Config)
	cfg.BearerToken = s.APIToken
	return cfg
}

// DeleteShardPod deletes shard id's pod, which revokes its tokens at once (the API
// server and the coordinator's TokenReviews refuse tokens of a deleted pod; the
// coordinator may still accept a review it cached shortly before). A later StartShard or
// ShardIdentity of id creates a new pod.
func (k *KShard) DeleteShardPod(id string) {
	k.t.Helper()
	if k.pods == nil {
		k.t.Fatalf("DeleteShardPod(%q): the KShard was made without PodIdentity", id)
	}
	k.pods.mu.Lock()
	defer k.pods.mu.Unlock()
	if err := k.deletePod(context.Background(), id); err != nil {
		k.t.Fatalf("deleting the pod of shard %s: %v", id, err)
	}
	delete(k.pods.shards, id)
}

// deletePod deletes pod name at once and waits until it is gone.
func (k *KShard) deletePod(ctx context.Context, name string) error {
	pods := k.f.Client.CoreV1().Pods(k.pods.namespace)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return waitPodGone(ctx, k, name)
}

func waitPodGone(ctx context.Context, k *KShard, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := k.f.Client.CoreV1().Pods(k.pods.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s still there: %w", k.pods.namespace, name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newShardIdentity reuses pod id when it exists (a restarted shard), creates it otherwise,
// and requests the two tokens bound to it. Called with pods.mu held.
func (k *KShard) newShardIdentity(ctx context.Context, id string) (*ShardIdentity, error) {
	p := k.pods
	pods := k.f.Client.CoreV1().Pods(p.namespace)
	pod, err := pods.Get(ctx, id, metav1.GetOptions{})
	switch {
	case err == nil && pod.DeletionTimestamp != nil:
		if err := waitPodGone(ctx, k, id); err != nil {
			return nil, err
		}
		pod = nil
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return nil, err
	}
	if pod == nil {
		node, err := k.nodeFor(ctx, id)
		if err != nil {
			return nil, err
		}
		labels := map[string]string{RunLabel: k.f.RunID, "app.kubernetes.io/component": "shard"}
		if g := k.opts.ShardGroups[id]; g != "" {
			labels[shardauth.GroupLabel] = g // as the chart's shardGroups Deployments label theirs
		}
		pod, err = pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: id, Labels: labels},
			Spec: corev1.PodSpec{
				ServiceAccountName:            ShardServiceAccount,
				AutomountServiceAccountToken:  new(bool),
				NodeName:                      node,
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "shard", Image: "registry.k8s.io/pause:3.10"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating pod %s/%s: %w", p.namespace, id, err)
		}
	}
	s := &ShardIdentity{Pod: pod.Name, UID: pod.UID, Node: pod.Spec.NodeName}
	if s.APIToken, err = k.podToken(ctx, pod, nil); err != nil {
		return nil, err
	}
	if s.CoordinatorToken, err = k.podToken(ctx, pod, []string{p.audience}); err != nil {
		return nil, err
	}
	s.Kubeconfig = filepath.Join(p.dir, id+".kubeconfig")
	if err := writeKubeconfig(k.f.Config, s.Kubeconfig, id, s.APIToken); err != nil {
		return nil, err
	}
	s.CoordinatorTokenFile = filepath.Join(p.dir, id+".coordinator-token")
	if err := writeFileAtomic(s.CoordinatorTokenFile, []byte(s.CoordinatorToken)); err != nil {
		return nil, err
	}
	return s, nil
}

// podToken requests a token of ShardServiceAccount bound to pod, for audiences (nil: the
// API server's own).
func (k *KShard) podToken(ctx context.Context, pod *corev1.Pod, audiences []string) (string, error) {
	exp := int64(shardTokenTTL / time.Second)
	tr, err := k.f.Client.CoreV1().ServiceAccounts(k.pods.namespace).CreateToken(ctx, ShardServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token bound to pod %s/%s (audiences %v): %w", pod.Namespace, pod.Name, audiences, err)
	}
	return tr.Status.Token, nil
}

// nodeFor picks one of the fake kwok nodes for a shard's pod, the same for the same ID.
func (k *KShard) nodeFor(ctx context.Context, id string) (string, error) {
	p := k.pods
	if len(p.nodes) == 0 {
		nodes, err := k.f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, n := range nodes.Items {
			if n.Annotations[kwokNodeAnnotation] == kwokNodeValue {
				p.nodes = append(p.nodes, n.Name)
			}
		}
		if len(p.nodes) == 0 {
			return "", fmt.Errorf("no node has the annotation %s=%s (hack/cluster.sh makes them)", kwokNodeAnnotation, kwokNodeValue)
		}
		sort.Strings(p.nodes)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return p.nodes[int(h.Sum32()%uint32(len(p.nodes)))], nil
}

// writeKubeconfig writes a kubeconfig for the server and CA of cfg whose user is token.
func writeKubeconfig(cfg *rest.Config, path, user, token string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
		TLSServerName:            cfg.ServerName,
	}
	if len(cfg.CAData) > 0 {
		cluster.CertificateAuthority = ""
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kshard-local"] = cluster
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "kshard-local", AuthInfo: user}
	kc.CurrentContext = user
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
}

// writeFileAtomic replaces path, so that a process reading it never sees half a file.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
