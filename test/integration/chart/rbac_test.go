package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	shardapp "github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/test/framework"
)

// release is one rendering of the chart applied (its RBAC and Secrets only) to the local
// control plane.
type release struct {
	name, namespace string
	objs            Objects
	secrets         map[string]*corev1.Secret
	coordinator     appsv1.Deployment
	shard           appsv1.Deployment
	shardRole       rbacv1.ClusterRole
}

// installRBAC renders the chart and applies its ServiceAccounts, Roles, ClusterRoles,
// bindings and TLS Secrets (not the Deployments: the test runs those as local processes).
// edit may change the objects first. Cluster-scoped objects are deleted when the test ends.
func installRBAC(t *testing.T, f *framework.Framework, name, namespace string, edit func(Objects), set ...string) *release {
	t.Helper()
	objs, _ := Render(t, name, namespace, nil, set...)
	if edit != nil {
		edit(objs)
	}
	r := &release{name: name, namespace: namespace, objs: objs, secrets: map[string]*corev1.Secret{}}
	Into(t, objs.Get(t, "Deployment", name+"-kshard-coordinator"), &r.coordinator)
	Into(t, objs.Get(t, "Deployment", name+"-kshard-shard"), &r.shard)
	var docs []string
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Secret":
		default:
			continue
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
		switch u.GetKind() {
		case "Secret":
			var s corev1.Secret
			Into(t, u, &s)
			r.secrets[s.Name] = &s
		case "ClusterRole":
			// The coordinator has ClusterRoles too (TokenReviews, the fence's labels).
			if u.GetLabels()["app.kubernetes.io/component"] == "shard" {
				Into(t, u, &r.shardRole)
			}
			fallthrough
		case "ClusterRoleBinding":
			kind, n := u.GetKind(), u.GetName()
			t.Cleanup(func() {
				if out, err := runKubectl(t, f, "delete", strings.ToLower(kind), n, "--ignore-not-found"); err != nil {
					t.Errorf("deleting %s %s: %v\n%s", kind, n, err, out)
				}
			})
		}
	}
	path := filepath.Join(t.TempDir(), name+"-rbac.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply (release %s):\n%s", name, kubectl(t, f, "apply", "-n", namespace, "-f", path))
	return r
}

// kubeconfigFor writes a kubeconfig that authenticates as the ServiceAccount with a
// token from the TokenRequest API.
func kubeconfigFor(t *testing.T, f *framework.Framework, namespace, sa string) string {
	t.Helper()
	tr, err := f.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", namespace, sa, err)
	}
	ca := f.Config.CAData
	if len(ca) == 0 && f.Config.CAFile != "" {
		if ca, err = os.ReadFile(f.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: f.Config.Host, CertificateAuthorityData: ca, InsecureSkipTLSVerify: f.Config.Insecure}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa}
	cfg.CurrentContext = sa
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitAllowed waits until the RBAC authorizer lets the ServiceAccount do every need (the
// bindings just applied take a moment to reach it).
func waitAllowed(t *testing.T, f *framework.Framework, namespace, sa string, needs []shardapp.Need) {
	t.Helper()
	user := "system:serviceaccount:" + namespace + ":" + sa
	framework.Eventually(t, 30*time.Second, user+" is allowed what it needs", func(ctx context.Context) (bool, error) {
		for _, n := range needs {
			res, sub, _ := strings.Cut(n.Resource, "/")
			r, err := f.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: n.Group, Resource: res, Subresource: sub, Verb: n.Verb},
			}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !r.Status.Allowed {
				return false, fmt.Errorf("not yet allowed: %s", n)
			}
		}
		return true, nil
	})
}

// startContainer runs a rendered Deployment's first container as a local process named
// podName, with the pod's env set for it.
func startContainer(t *testing.T, d *appsv1.Deployment, podName string, r *release, kubeconfig string, overrides map[string]string) *framework.Process {
	t.Helper()
	spec := d.Spec.Template.Spec
	lc := Localize(t, spec, spec.Containers[0], PodFields{Name: podName, Namespace: r.namespace, IP: "127.0.0.1"}, r.secrets, kubeconfig, overrides)
	for k, v := range lc.Env {
		t.Setenv(k, v) // inherited by the process started next
	}
	t.Logf("starting %s: %s", podName, lc)
	return framework.Start(t, podName, framework.Binary(t, lc.Binary), lc.Args...)
}

// enabledControllers returns the selection to render and the shard's enabled controllers:
// the chart's default ("*") less those the cluster's own kube-controller-manager runs, so
// that kshard and the cluster never run the same controller.
func enabledControllers(t *testing.T, f *framework.Framework) ([]string, []controllers.Descriptor) {
	t.Helper()
	reg, err := controllers.NewRegistry(shardapp.Descriptors()...)
	if err != nil {
		t.Fatal(err)
	}
	list := "*"
	if os.Getenv(framework.UpstreamControllersEnv) != "1" {
		if list, err = f.KCMControllers(); err != nil {
			t.Fatal(err)
		}
	}
	sel := []string{"*"}
	for _, d := range shardapp.Descriptors() {
		runs := os.Getenv(framework.UpstreamControllersEnv) == "1"
		if !runs {
			if runs, err = f.KCMRuns(d.Name); err != nil {
				t.Fatal(err)
			}
		}
		if d.OnByDefault && runs {
			sel = append(sel, "-"+d.Name)
		}
	}
	t.Logf("the cluster's kube-controller-manager runs --controllers=%s; rendering controllers=%v", list, sel)
	return sel, reg.Enabled(controllers.Selection(sel))
}

func setControllers(sel []string) []string {
	var set []string
	for i, s := range sel {
		set = append(set, fmt.Sprintf("controllers[%d]=%s", i, s))
	}
	return set
}

// TestRBACIsEnough is the chart's RBAC proof: the real binaries, with the rendered
// Deployments' arguments and environment, authenticated as the chart's ServiceAccounts,
// become Ready and reconcile on the local control plane; and a shard whose ClusterRole
// lacks one permission exits naming it.
func TestRBACIsEnough(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	sel, enabled := enabledControllers(t, f)
	// The fence is off here (below): so is it in the chart, whose RBAC must then be
	// enough without the fence's ClusterRole. Placement by load counts namespaces with an
	// informer of the coordinator's own without the fence: the chart must let it list and
	// watch them, or the coordinator never leads.
	r := installRBAC(t, f, "rbac", ns, nil, append(setControllers(sel), "shardFence.enabled=false", "coordinator.extraArgs[0]=--placement=load")...)
	coordSA, shardSA := r.coordinator.Spec.Template.Spec.ServiceAccountName, r.shard.Spec.Template.Spec.ServiceAccountName
	needs := shardapp.RequiredPermissions(enabled)
	waitAllowed(t, f, ns, shardSA, needs)
	// The coordinator reviews shard tokens (shardAuth.mode=token, the default).
	waitAllowed(t, f, ns, coordSA, []shardapp.Need{{Owner: "coordinator", Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}})
	// And reads the shard pod a token is bound to, for the group its session claims.
	waitAllowedIn(t, f, ns, coordSA, "pods", "get")
	coordKubeconfig, shardKubeconfig := kubeconfigFor(t, f, ns, coordSA), kubeconfigFor(t, f, ns, shardSA)

	var coords []*framework.Coordinator
	var grpcAddrs []string
	for i := range 2 {
		grpc := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		httpAddr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		name := fmt.Sprintf("rbac-kshard-coordinator-%d", i)
		// Local processes have no pod, so no pod-bound token: the coordinator takes shard IDs
		// on trust here, and the shards run without their token (withoutShardToken). Without
		// the pod-name extra the server-side fence would refuse every shard write, so it is
		// off here (test/integration/sharding runs it, with pods per shard).
		p := startContainer(t, &r.coordinator, name, r, coordKubeconfig, map[string]string{
			"--grpc-bind-address": grpc, "--advertise-address": grpc, "--http-bind-address": httpAddr, "--shard-auth": "none",
			"--shard-fence": "false",
		})
		coords = append(coords, &framework.Coordinator{Process: p, Name: name, GRPCAddr: grpc, HTTPURL: "http://" + httpAddr})
		grpcAddrs = append(grpcAddrs, grpc)
	}
	var shards []*framework.Shard
	for i := range 2 {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		name := fmt.Sprintf("rbac-kshard-shard-%d", i)
		// The chart gives shards every coordinator replica (the headless peers Service);
		// here shard 1 gets every coordinator's address and follows the leader hint, as it
		// would from a follower's pod IP. Shard 0's name resolves to nothing, as the peers
		// Service after every pod was replaced while kshard writes the EndpointSlices: it
		// finds the leader through the election Lease the chart lets it read
		// (--coordinator-lease).
		addrs := strings.Join(grpcAddrs, ",")
		if i == 0 {
			addrs = "coordinator-peers.invalid:1"
		}
		p := startContainer(t, withoutShardToken(&r.shard), name, r, shardKubeconfig, map[string]string{
			"--coordinator-address": addrs, "--http-bind-address": httpAddr,
		})
		shards = append(shards, &framework.Shard{Process: p, Name: name, HTTPURL: "http://" + httpAddr})
	}

	// Ready: exactly one coordinator (the leader), every shard.
	var leader *framework.Coordinator
	framework.Eventually(t, 90*time.Second, "one coordinator leads and is Ready", func(ctx context.Context) (bool, error) {
		leader = nil
		for _, c := range coords {
			if c.Exited() {
				return false, fmt.Errorf("%s exited; log %s", c.Name, c.LogPath)
			}
			code, _, err := framework.HTTPGet(ctx, c.HTTPURL+"/readyz")
			if err != nil {
				return false, err
			}
			if code == http.StatusOK {
				if leader != nil {
					return false, fmt.Errorf("two coordinators Ready")
				}
				leader = c
			}
		}
		return leader != nil, nil
	})
	for _, s := range shards {
		framework.Eventually(t, 90*time.Second, s.Name+" is Ready", func(ctx context.Context) (bool, error) {
			if s.Exited() {
				return false, fmt.Errorf("%s exited; log %s", s.Name, s.LogPath)
			}
			code, body, err := framework.HTTPGet(ctx, s.HTTPURL+"/readyz")
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("readyz %d: %s", code, body)
			}
			return err == nil, err
		})
	}
	// Reconciling: the leader assigned every partition and each shard acquired some.
	framework.Eventually(t, 90*time.Second, "every partition is owned and each shard has some", func(ctx context.Context) (bool, error) {
		a, err := leader.Assignments(ctx)
		if err != nil {
			return false, err
		}
		owners := framework.Owners(a)
		per := map[string]int{}
		for _, s := range owners {
			per[s]++
		}
		if len(owners) != a.PartitionCount || len(per) != len(shards) {
			return false, fmt.Errorf("%d of %d partitions owned, by %v", len(owners), a.PartitionCount, per)
		}
		t.Logf("leader %s: partitions per shard %v", leader.Name, per)
		return true, nil
	})

	names := make([]string, 0, len(enabled))
	for _, d := range enabled {
		names = append(names, d.Name)
	}
	if slices.Contains(names, "deployment") && slices.Contains(names, "replicaset") {
		checkDeploymentAvailable(t, f)
	} else {
		t.Logf("shards run %v (not both deployment and replicaset): reconciling shown as partitions acquired", names)
	}

	t.Run("shard lacking a permission exits naming it", func(t *testing.T) {
		testMissingPermission(t, f, ns, sel, needs, strings.Join(grpcAddrs, ","))
	})
}

// checkDeploymentAvailable creates a Deployment in a fresh namespace and waits for the
// shards (the only ones running the controllers) to make it Available.
func checkDeploymentAvailable(t *testing.T, f *framework.Framework) {
	t.Helper()
	wns := f.Namespace(t, nil).Name
	d := framework.NewRollingDeployment("web", 3, intstr.FromString("25%"), intstr.FromString("25%"), "registry.k8s.io/pause:3.10", nil)
	if _, err := f.Client.AppsV1().Deployments(wns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 120*time.Second, "Deployment "+wns+"/web is Available", func(ctx context.Context) (bool, error) {
		got, err := f.Client.AppsV1().Deployments(wns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && got.Status.AvailableReplicas == 3 {
				t.Logf("Deployment %s/web Available: %d/%d replicas available", wns, got.Status.AvailableReplicas, *got.Spec.Replicas)
				return true, nil
			}
		}
		return false, fmt.Errorf("status %+v", got.Status)
	})
}

// testMissingPermission installs a second release whose shard ClusterRole lacks one grant
// that only one need asks for, runs its shard, and checks it exits non-zero with a message
// naming the user, the controller (or the shard), the verb and the resource.
func testMissingPermission(t *testing.T, f *framework.Framework, ns string, sel []string, needs []shardapp.Need, coordinators string) {
	count := map[Grant]int{}
	for _, n := range needs {
		count[Grant{n.Group, n.Resource, n.Verb}]++
	}
	// A need a wildcard rule (group "*", resource "*": the namespace controller's, the
	// garbage collector's) also grants stays granted when its own rule loses it.
	wildcard := map[string]bool{}
	for _, n := range needs {
		if n.Group == "*" && n.Resource == "*" {
			wildcard[n.Verb] = true
		}
	}
	var drop *shardapp.Need
	for i := len(needs) - 1; i >= 0; i-- { // prefer a controller's need (they sort last)
		if wildcard[needs[i].Verb] && needs[i].Group != "*" {
			continue
		}
		if count[Grant{needs[i].Group, needs[i].Resource, needs[i].Verb}] == 1 {
			drop = &needs[i]
			break
		}
	}
	if drop == nil {
		t.Fatalf("no need is asked for once: %v", needs)
	}
	dropped := Grant{drop.Group, drop.Resource, drop.Verb}
	r := installRBAC(t, f, "lacking", ns, func(objs Objects) {
		for _, u := range objs.Kind("ClusterRole") {
			if u.GetLabels()["app.kubernetes.io/component"] == "shard" {
				removeGrant(t, u, dropped)
			}
		}
	}, setControllers(sel)...)
	sa := r.shard.Spec.Template.Spec.ServiceAccountName
	var rest []shardapp.Need
	for _, n := range needs {
		if n != *drop {
			rest = append(rest, n)
		}
	}
	waitAllowed(t, f, ns, sa, rest)
	p := startContainer(t, withoutShardToken(&r.shard), "lacking-kshard-shard-0", r, kubeconfigFor(t, f, ns, sa), map[string]string{
		"--coordinator-address": coordinators, "--http-bind-address": fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t)),
	})
	exited, err := p.Wait(60 * time.Second)
	if !exited {
		t.Fatalf("the shard lacking %s still runs after 60s; log %s", dropped, p.LogPath)
	}
	if err == nil {
		t.Fatalf("the shard lacking %s exited 0; log %s", dropped, p.LogPath)
	}
	msg := failureMessage(t, p.LogPath)
	t.Logf("the shard lacking %s exited (%v) with:\n%s", dropped, err, msg)
	for _, want := range []string{
		fmt.Sprintf("user %q lacks 1 permission(s)", "system:serviceaccount:"+ns+":"+sa),
		drop.String(),
		"--check-permissions=false",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure message lacks %q", want)
		}
	}
}

// removeGrant rewrites a ClusterRole's rules without one verb on one group/resource.
func removeGrant(t *testing.T, u *unstructured.Unstructured, g Grant) {
	t.Helper()
	var role rbacv1.ClusterRole
	Into(t, u, &role)
	grants, err := GrantsOfRules(role.Rules)
	if err != nil {
		t.Fatal(err)
	}
	if !grants[g] {
		t.Fatalf("ClusterRole %s does not grant %s", role.Name, g)
	}
	var rules []any
	for have := range grants {
		if have != g {
			rules = append(rules, map[string]any{"apiGroups": []any{have.Group}, "resources": []any{have.Resource}, "verbs": []any{have.Verb}})
		}
	}
	u.Object["rules"] = rules
}

// failureMessage returns the error of the last "shard failed" line of a JSON log.
func failureMessage(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The log file is appended to across runs: the last failure is this run's.
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var m map[string]any
		if json.Unmarshal([]byte(lines[i]), &m) != nil {
			continue
		}
		if m["msg"] == "shard failed" {
			s, _ := m["err"].(string)
			return s
		}
	}
	t.Fatalf("no \"shard failed\" line in %s:\n%s", path, b)
	return ""
}
