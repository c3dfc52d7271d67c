package helm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/integration/chart"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	release   = "kshard"
	namespace = "kshard-system"
	// realNode is the label and taint of the real node (hack/node.sh).
	realNode = "kshard.io/real-node"
	httpPort = 8080
	// workloadNamespaces is the sample workload's size (the 20).
	workloadNamespaces = 20
)

// e2e is the state the steps share: one release, installed once and changed step by step.
type e2e struct {
	// parent is the whole test's T: objects made in one step and used by later ones
	// (the workload's namespaces) live as long as it.
	parent *testing.T
	f      *framework.Framework
	values []string // helm flags: the chart's defaults plus the image and root CA
	// workload are the sample workload's namespaces; dashboardLoad step 6's.
	workload      []string
	dashboardLoad []string
	// version is the chart's appVersion, the image's tag.
	version string
}

// upgrade runs helm upgrade with the install values and more, and waits for it.
func (e *e2e) upgrade(t *testing.T, more []string) {
	t.Helper()
	start := time.Now()
	e.helm(t, append(append([]string{"upgrade", release, chart.ChartDir(), "--namespace", namespace, "--wait", "--timeout", "5m"}, e.values...), more...)...)
	t.Logf("helm upgrade %s --wait: done after %s", strings.Join(more, " "), time.Since(start).Round(time.Second))
}

// TestHelmOnRealNode installs the chart with helm onto the real node and takes it
// through what a user does with it, step by step; a step that fails stops the rest and
// prints the release's pods, events and logs.
func TestHelmOnRealNode(t *testing.T) {
	f := framework.Get(t)
	// The node is make helm-e2e's (hack/node.sh up): without it nothing of the release
	// would schedule, and the cluster's kube-controller-manager is not this test's to
	// restart.
	if n, err := f.Client.CoreV1().Nodes().Get(context.Background(), "kshard-node", metav1.GetOptions{}); err != nil || n.Labels[realNode] != "true" {
		t.Fatalf("no real node kshard-node in the cluster of %s (%v): run make helm-e2e, which starts a control plane with one (hack/node.sh)", f.Kubeconfig, err)
	}
	e := &e2e{parent: t, f: f}
	e.values = e.installValues(t)
	e.version = appVersion(t)
	// Runs after the workload namespaces' deletion (cleanups run last in, first out):
	// the release's namespace controller finishes them, so that no second kshard has to.
	t.Cleanup(func() { e.waitNamespacesGone(t) })
	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"1_install", e.install},
		{"2_workload_and_fence", e.workloadAndFence},
		{"3_cold_start", e.coldStart},
		{"4_scale_and_disruption_budget", e.scale},
		{"5_coordinator_failover_and_upgrade", e.failoverAndUpgrade},
		{"6_prometheus_and_dashboards", e.prometheusAndDashboards},
		{"7_uninstall_and_reinstall", e.reinstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			e.dump(t)
			t.FailNow()
		}
	}
}

// installValues are the flags of every install and upgrade: the chart's defaults, the
// image that is imported into the node (never pulled), the cluster's root CA, and the
// real node's label and taint.
func (e *e2e) installValues(t *testing.T) []string {
	ca := filepath.Join(filepath.Dir(e.f.Kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("the cluster's CA: %v", err)
	}
	onNode := fmt.Sprintf(`{"%s":"true"}`, realNode)
	tolerate := fmt.Sprintf(`[{"key":"%s","operator":"Exists","effect":"NoSchedule"}]`, realNode)
	return []string{
		"--set", "image.pullPolicy=Never",
		"--set-file", "rootCA.pem=" + ca,
		"--set-json", "coordinator.nodeSelector=" + onNode, "--set-json", "coordinator.tolerations=" + tolerate,
		"--set-json", "shard.nodeSelector=" + onNode, "--set-json", "shard.tolerations=" + tolerate,
	}
}

func (e *e2e) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := chart.RunHelm(t, append(args, "--kubeconfig", e.f.Kubeconfig)...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// helmInstall installs the release as a platform team does: kube-controller-manager
// still runs every controller, so that kshard's own Deployments roll out (their
// controllers are kshard's); once kshard is Ready, kube-controller-manager's copies of
// kshard's controllers are switched off, and kshard runs them, for its own Deployments too.
func (e *e2e) helmInstall(t *testing.T) {
	t.Helper()
	e.kcmRunsKShardControllers(t, true)
	start := time.Now()
	e.helm(t, append([]string{"install", release, chart.ChartDir(), "--namespace", namespace, "--create-namespace",
		"--wait", "--timeout", "5m"}, e.values...)...)
	t.Logf("helm install --wait: every Deployment Available after %s", time.Since(start).Round(time.Second))
	e.kcmRunsKShardControllers(t, false)
}

// kcmRunsKShardControllers restarts the cluster's kube-controller-manager with kshard's
// controllers on or off (hack/cluster.sh restarts it when its list changes).
func (e *e2e) kcmRunsKShardControllers(t *testing.T, on bool) {
	t.Helper()
	e.clusterUp(t, "KSHARD_UPSTREAM_CONTROLLERS="+map[bool]string{true: "1", false: "0"}[on], "KSHARD_KCM_KEEPS=")
}

// kcmAlsoRuns restarts the cluster's kube-controller-manager with kshard's controllers off
// but the named ones (canonical names; none: all off).
func (e *e2e) kcmAlsoRuns(t *testing.T, controllers ...string) {
	t.Helper()
	e.clusterUp(t, "KSHARD_UPSTREAM_CONTROLLERS=0", "KSHARD_KCM_KEEPS="+strings.Join(controllers, ","))
}

// clusterUp runs hack/cluster.sh up with more environment, which restarts
// kube-controller-manager when its controller list changes.
func (e *e2e) clusterUp(t *testing.T, env ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "cluster.sh"), "up")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster.sh up: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("kube-controller-manager: %s", lines[len(lines)-1])
}

// pods lists the release's Running pods of a component (coordinator or shard).
func (e *e2e) pods(t *testing.T, component string) []*corev1.Pod {
	t.Helper()
	list, err := e.f.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=" + component + ",app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// leader returns the coordinator pod that leads: the one whose plain /readyz answers 200
// (the chart's probe leaves the leader check out, so both pods are Ready).
func (e *e2e) leader(t *testing.T) *corev1.Pod {
	t.Helper()
	var leader *corev1.Pod
	framework.Eventually(t, 60*time.Second, "one coordinator pod leads (Ready)", func(ctx context.Context) (bool, error) {
		var err error
		leader, err = e.leaderPod(ctx, t)
		return err == nil, err
	})
	return leader
}

// leaderPod is the coordinator pod that leads now, or an error saying why there is none.
func (e *e2e) leaderPod(ctx context.Context, t *testing.T) (*corev1.Pod, error) {
	var leader *corev1.Pod
	for _, p := range e.pods(t, "coordinator") {
		if !podReady(p) || p.Status.PodIP == "" {
			continue
		}
		code, _, err := podGet(ctx, p, httpPort, "/readyz")
		if err == nil && code == 200 {
			if leader != nil {
				return nil, fmt.Errorf("both %s and %s answer as the leader", leader.Name, p.Name)
			}
			leader = p
		}
	}
	if leader == nil {
		return nil, errors.New("no coordinator pod leads")
	}
	return leader, nil
}

// waitOwned waits until the leader's assignments are converged, every partition owned by
// a connected shard whose ID is the name of one of the want shard pods, and each such
// shard owns some. It returns the assignments.
func (e *e2e) waitOwned(t *testing.T, want int, timeout time.Duration) coordinatorrpc.Assignments {
	t.Helper()
	var a coordinatorrpc.Assignments
	framework.Eventually(t, timeout, fmt.Sprintf("every partition owned by the %d shard pods", want), func(ctx context.Context) (bool, error) {
		var err error
		a, err = e.owned(ctx, t, want)
		return err == nil, err
	})
	return a
}

// owned returns the leader's assignments if they are as waitOwned wants, or what is not.
func (e *e2e) owned(ctx context.Context, t *testing.T, want int) (coordinatorrpc.Assignments, error) {
	var a coordinatorrpc.Assignments
	pods := e.pods(t, "shard")
	names := map[string]bool{}
	for _, p := range pods {
		if podReady(p) {
			names[p.Name] = true
		}
	}
	if len(names) != want || len(pods) != want {
		return a, fmt.Errorf("%d shard pods, %d Ready, want %d", len(pods), len(names), want)
	}
	leader, err := e.leaderPod(ctx, t)
	if err != nil {
		return a, err
	}
	if a, err = assignments(ctx, leader, httpPort); err != nil {
		return a, err
	}
	if !a.Converged || a.MovesInFlight != 0 {
		return a, fmt.Errorf("assignments not converged (%d moves in flight, by state %v)", a.MovesInFlight, a.ByState)
	}
	owned := 0
	for _, s := range a.Shards {
		if !names[s.Shard] {
			if len(s.PartitionIDs) > 0 {
				return a, fmt.Errorf("shard %s owns %d partitions but is no Ready shard pod", s.Shard, len(s.PartitionIDs))
			}
			continue
		}
		if !s.Connected || s.Fenced || len(s.PartitionIDs) == 0 {
			return a, fmt.Errorf("shard %s: connected %t, fenced %t, %d partitions", s.Shard, s.Connected, s.Fenced, len(s.PartitionIDs))
		}
		owned += len(s.PartitionIDs)
		delete(names, s.Shard)
	}
	if len(names) > 0 {
		return a, fmt.Errorf("shard pods the coordinator does not know: %v", names)
	}
	if owned != a.PartitionCount {
		return a, fmt.Errorf("%d of %d partitions owned", owned, a.PartitionCount)
	}
	return a, nil
}

// install: helm install; every pod Running and Ready through its own probes, as a non-root
// user on a read-only root filesystem; the shards, dialling the coordinator's Service name
// over mutual TLS with their projected tokens, own every partition under their pod names.
func (e *e2e) install(t *testing.T) {
	e.helmInstall(t)
	for _, component := range []string{"coordinator", "shard"} {
		for _, p := range e.pods(t, component) {
			if p.Spec.NodeName != "kshard-node" || !podReady(p) {
				t.Fatalf("pod %s on node %q, Ready %t: want Ready on the real node", p.Name, p.Spec.NodeName, podReady(p))
			}
			for _, cs := range p.Status.ContainerStatuses {
				pid, err := containerProcess(cs.ContainerID)
				if err != nil {
					t.Fatalf("pod %s container %s: %v", p.Name, cs.Name, err)
				}
				real, eff, err := processUser(pid)
				if err != nil {
					t.Fatal(err)
				}
				ro, err := rootReadOnly(pid)
				if err != nil {
					t.Fatal(err)
				}
				if real != "65532" || eff != "65532" || !ro {
					t.Fatalf("pod %s container %s (pid %d): uid %s/%s, read-only root %t; want 65532 and true", p.Name, cs.Name, pid, real, eff, ro)
				}
				t.Logf("pod %s container %s: Ready, pid %d runs as uid %s with a read-only root filesystem", p.Name, cs.Name, pid, eff)
			}
		}
	}
	a := e.waitOwned(t, 3, 2*time.Minute)
	t.Logf("every one of %d partitions owned by the 3 shard pods, by pod name: %s", a.PartitionCount, shardSummary(a))
	// The shards dial the peers Service by name, with TLS and a token: say so from their
	// own flags, as the pod runs them.
	for _, p := range e.pods(t, "shard") {
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		for _, want := range []string{"--coordinator-address=kshard-coordinator-peers." + namespace + ".svc:", "--grpc-tls-cert-file=", "--coordinator-token-file="} {
			if !strings.Contains(args, want) {
				t.Fatalf("shard pod %s runs without %s: %s", p.Name, want, args)
			}
		}
	}
	// The local kube-controller-manager runs no EndpointSlice controller (kshard's
	// replaces it): the kube-dns and peers Services have slices only because a shard
	// wrote them, and a shard got there before any slice existed (through the election
	// Lease, --coordinator-lease, when the peers name resolved to nothing).
	for _, svc := range []struct{ namespace, name string }{{"kube-system", "kube-dns"}, {namespace, "kshard-coordinator-peers"}} {
		framework.Eventually(t, 2*time.Minute, svc.name+"'s EndpointSlice written by kshard", func(ctx context.Context) (bool, error) {
			l, err := e.f.Client.DiscoveryV1().EndpointSlices(svc.namespace).List(ctx, metav1.ListOptions{
				LabelSelector: "kubernetes.io/service-name=" + svc.name + ",endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"})
			if err != nil {
				return false, err
			}
			for _, sl := range l.Items {
				if len(sl.Endpoints) > 0 {
					return true, nil
				}
			}
			return false, fmt.Errorf("%d managed slices, none with an endpoint", len(l.Items))
		})
	}
	framework.Eventually(t, time.Minute, "CoreDNS answers through the kube-dns Service", func(ctx context.Context) (bool, error) {
		out, err := inNode(ctx, "dig", "+short", "+time=1", "+tries=1", "@10.0.0.10", "kubernetes.default.svc.cluster.local")
		if err != nil {
			return false, err
		}
		if got := strings.TrimSpace(string(out)); got != "10.0.0.1" {
			return false, fmt.Errorf("answer %q", got)
		}
		return true, nil
	})
	t.Logf("the shards reached the coordinator (the peers Service kshard-coordinator-peers.%s.svc, or the election Lease before any slice existed), with mutual TLS and their projected tokens; kshard wrote the kube-dns and peers Services' EndpointSlices, and CoreDNS answers through the kube-dns Service", namespace)
}

func shardSummary(a coordinatorrpc.Assignments) string {
	var parts []string
	for _, s := range a.Shards {
		parts = append(parts, fmt.Sprintf("%s=%d", s.Shard, len(s.PartitionIDs)))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// workloadAndFence: a Deployment in each of 20 namespaces, on kwok's nodes, rolled out by
// kshard; a shard's own credentials write in a namespace it owns and are refused by the
// fence in one it does not.
func (e *e2e) workloadAndFence(t *testing.T) {
	ctx := context.Background()
	e.workload = nil
	for i := 0; i < workloadNamespaces; i++ {
		ns := e.f.Namespace(e.parent, nil)
		e.workload = append(e.workload, ns.Name)
		replicas := int32(2)
		labels := map[string]string{"app": "sample"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "sample"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector: map[string]string{"type": "kwok"},
						Containers:   []corev1.Container{{Name: "app", Image: "sample:1"}},
					},
				},
			},
		}
		if _, err := e.f.Client.AppsV1().Deployments(ns.Name).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 2*time.Minute, "the 20 sample Deployments Available", func(ctx context.Context) (bool, error) {
		for _, ns := range e.workload {
			d, err := e.f.Client.AppsV1().Deployments(ns).Get(ctx, "sample", metav1.GetOptions{})
			if err != nil || d.Status.AvailableReplicas != 2 || d.Status.ObservedGeneration != d.Generation {
				return false, err
			}
		}
		return true, nil
	})
	t.Logf("%d Deployments rolled out by kshard (2 Available replicas each, on kwok nodes)", workloadNamespaces)

	// The fence: a shard pod's own API token, read where the kubelet projected it.
	leader := e.leader(t)
	owners := map[string]string{}
	for _, ns := range e.workload {
		o, err := ownerOf(ctx, leader, ns)
		if err != nil {
			t.Fatal(err)
		}
		owners[ns] = o.Shard
	}
	shard := e.pods(t, "shard")[0]
	var mine, theirs string
	for _, ns := range e.workload {
		if owners[ns] == shard.Name && mine == "" {
			mine = ns
		}
		if owners[ns] != shard.Name && theirs == "" {
			theirs = ns
		}
	}
	if mine == "" || theirs == "" {
		t.Fatalf("shard %s owns none or all of the 20 namespaces (%v): cannot show the fence", shard.Name, owners)
	}
	client := e.shardClient(t, shard)
	patch := []byte(`{"metadata":{"annotations":{"kshard.io/e2e-fence":"written"}}}`)
	if _, err := client.AppsV1().Deployments(mine).Patch(ctx, "sample", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("shard %s patching a Deployment in %s, which it owns: %v", shard.Name, mine, err)
	}
	_, err := client.AppsV1().Deployments(theirs).Patch(ctx, "sample", types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), ownerrecord.MessagePrefix) {
		t.Fatalf("shard %s patching a Deployment in %s, owned by %s: %v; want the fence's refusal", shard.Name, theirs, owners[theirs], err)
	}
	t.Logf("with its own projected token, shard %s wrote in %s (its own) and was refused in %s (%s's): %v", shard.Name, mine, theirs, owners[theirs], err)
}

// ownerOf asks the leader which shard owns a namespace.
func ownerOf(ctx context.Context, leader *corev1.Pod, ns string) (coordinatorrpc.Owner, error) {
	var o coordinatorrpc.Owner
	code, body, err := podGet(ctx, leader, httpPort, "/assignments?namespace="+ns)
	if err != nil {
		return o, err
	}
	if code != 200 {
		return o, fmt.Errorf("GET /assignments?namespace=%s: %d %s", ns, code, body)
	}
	return o, json.Unmarshal(body, &o)
}

// shardClient is a client with a shard pod's own API token, as its container reads it.
func (e *e2e) shardClient(t *testing.T, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	var volume string
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			volume = v.Name
		}
	}
	if volume == "" {
		t.Fatalf("pod %s has no kube-api-access volume", pod.Name)
	}
	cfg := rest.CopyConfig(e.f.Config)
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = nil, nil
	cfg.BearerToken = projectedToken(t, pod, volume)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// scale: 5 shards, then 2; partitions handed over each time, none left unowned; the
// shards' PodDisruptionBudget (maxUnavailable 1) lets one eviction through and refuses
// the next while the evicted shard's replacement is not Ready.
func (e *e2e) scale(t *testing.T) {
	for _, n := range []int{5, 2} {
		start := time.Now()
		e.kubectl(t, "-n", namespace, "scale", "deployment", "kshard-shard", "--replicas="+strconv.Itoa(n))
		a := e.waitOwned(t, n, 3*time.Minute)
		t.Logf("scaled to %d: every partition owned again after %s: %s", n, time.Since(start).Round(time.Second), shardSummary(a))
	}
	// Evict every shard pod, as kubectl drain does, one request each, once the budget
	// has caught up with the 2 Ready shards.
	ctx := context.Background()
	framework.Eventually(t, time.Minute, "the shards' PodDisruptionBudget allows one disruption", func(ctx context.Context) (bool, error) {
		pdb, err := e.f.Client.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, "kshard-shard", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 2 && pdb.Status.DisruptionsAllowed == 1, nil
	})
	pods := e.pods(t, "shard")
	var evicted, refused []string
	for _, p := range pods {
		err := e.f.Client.CoreV1().Pods(namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case err == nil:
			evicted = append(evicted, p.Name)
		case apierrors.IsTooManyRequests(err):
			refused = append(refused, p.Name)
		default:
			t.Fatalf("evicting %s: %v", p.Name, err)
		}
	}
	if len(evicted) != 1 || len(refused) != len(pods)-1 {
		t.Fatalf("evicting %d shard pods at once: evicted %v, refused %v; want one through and the rest refused by the PodDisruptionBudget", len(pods), evicted, refused)
	}
	t.Logf("PodDisruptionBudget: eviction of %v allowed, of %v refused (429) while one shard is down", evicted, refused)
	a := e.waitOwned(t, 2, 3*time.Minute)
	t.Logf("after the eviction, the replacement shard took its share: %s", shardSummary(a))
}

// reinstall: helm uninstall removes every object of the release, cluster-scoped ones
// included; a second install, with the namespaces' kshard labels still there, owns every
// partition again and rolls a workload out.
func (e *e2e) reinstall(t *testing.T) {
	ctx := context.Background()
	manifest := e.helm(t, "get", "manifest", release, "--namespace", namespace)
	objs, err := chart.Decode([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	// As a platform team does before removing kshard: kube-controller-manager runs the
	// controllers again (its garbage collector removes the release's ReplicaSets and pods).
	e.kcmRunsKShardControllers(t, true)
	e.helm(t, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "3m")
	left, err := e.remaining(ctx, objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("helm uninstall left %v", left)
	}
	t.Logf("helm uninstall removed all %d objects of the release (%s)", len(objs), kinds(objs))
	framework.Eventually(t, 2*time.Minute, "the release's pods gone", func(context.Context) (bool, error) {
		return len(e.pods(t, "coordinator")) == 0 && len(e.pods(t, "shard")) == 0, nil
	})
	labelled := 0
	for _, ns := range e.workload {
		n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := n.Labels[ownerrecord.DefaultPartitionLabel]; ok {
			labelled++
		}
	}
	if labelled != len(e.workload) {
		t.Fatalf("after helm uninstall, %d of %d workload namespaces carry %s; the reinstall is meant to meet them labelled", labelled, len(e.workload), ownerrecord.DefaultPartitionLabel)
	}
	t.Logf("all %d workload namespaces still carry %s", len(e.workload), ownerrecord.DefaultPartitionLabel)

	e.helmInstall(t)
	a := e.waitOwned(t, 3, 2*time.Minute)
	t.Logf("reinstalled: every one of %d partitions owned again: %s", a.PartitionCount, shardSummary(a))
	// kshard works again: a scale of each sample Deployment is rolled out.
	for _, ns := range e.workload {
		e.kubectl(t, "-n", ns, "scale", "deployment", "sample", "--replicas=3")
	}
	framework.Eventually(t, 2*time.Minute, "the 20 sample Deployments at 3 Available replicas", func(ctx context.Context) (bool, error) {
		for _, ns := range e.workload {
			d, err := e.f.Client.AppsV1().Deployments(ns).Get(ctx, "sample", metav1.GetOptions{})
			if err != nil || d.Status.AvailableReplicas != 3 || d.Status.ObservedGeneration != d.Generation {
				return false, err
			}
		}
		return true, nil
	})
	t.Logf("after the reinstall, kshard scaled the %d sample Deployments to 3", len(e.workload))
}

// remaining returns which of objs still exist, found by their kinds' scope as the API
// server's discovery says it (a namespaced object in the release's namespace).
func (e *e2e) remaining(ctx context.Context, objs chart.Objects) ([]string, error) {
	disco, err := discovery.NewDiscoveryClientForConfig(e.f.Config)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	dyn, err := dynamic.NewForConfig(e.f.Config)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(namespace)
		}
		switch _, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{}); {
		case err == nil:
			left = append(left, gvk.Kind+"/"+o.GetName())
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return left, nil
}

func kinds(objs chart.Objects) string {
	count := map[string]int{}
	for _, o := range objs {
		count[o.GetKind()]++
	}
	var out []string
	for k, n := range count {
		out = append(out, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func (e *e2e) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.kubectlCommand(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectlCommand is the tool cache's kubectl with the cluster's admin kubeconfig.
func (e *e2e) kubectlCommand(args ...string) *exec.Cmd {
	bin := "kubectl"
	if out, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output(); err == nil {
		bin = strings.TrimSpace(string(out))
	}
	return exec.Command(bin, append([]string{"--kubeconfig", e.f.Kubeconfig}, args...)...)
}

// dump prints what a user would look at when a step fails: the release's pods, the
// namespace's events and the pods' logs from the node.
func (e *e2e) dump(t *testing.T) {
	for _, args := range [][]string{
		{"get", "pods", "-n", namespace, "-o", "wide"},
		{"describe", "pods", "-n", namespace},
		{"get", "events", "-n", namespace, "--sort-by=.lastTimestamp"},
	} {
		out, _ := e.kubectlCommand(args...).CombinedOutput()
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
	t.Logf("the release's container logs:\n%s", podLogs(namespace))
}

// waitNamespacesGone waits until the test's namespaces, deleted when the test ends,
// are finished.
func (e *e2e) waitNamespacesGone(t *testing.T) {
	framework.Eventually(t, 2*time.Minute, "the workload namespaces finished", func(ctx context.Context) (bool, error) {
		for _, ns := range slices.Concat(e.workload, e.dashboardLoad) {
			if _, err := e.f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
}

// appVersion is the chart's appVersion, the tag of the image make image builds.
func appVersion(t *testing.T) string {
	data, err := os.ReadFile(filepath.Join(chart.ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("no appVersion in Chart.yaml")
	return ""
}
