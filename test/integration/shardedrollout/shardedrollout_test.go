// Package shardedrollout tests kshard's ReplicaSet and Deployment controllers under
// sharding: three shards (two coordinators) roll out Deployments in many namespaces while
// the namespaces move between shards (scale-out to four shards, a graceful scale-in, a
// SIGKILLed shard). A pod watch in the test checks at every pod event it observes that no
// ReplicaSet has more non-terminating pods than its Deployment's replicas + maxSurge
// allows (two shards working one namespace at once would create duplicates), and at the
// end every Deployment must have completed its latest rollout.
//
// TestUpstreamSurgeReference runs the same rollouts on the reference control plane
// (upstream kube-controller-manager) to measure what upstream itself shows for the
// per-Deployment total, which is reported, not asserted (docs/controllers.md).
package shardedrollout

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	// namespaces each get two Deployments of the fixtures below.
	namespaces = 30
	// referenceNamespaces is the size of the upstream reference run.
	referenceNamespaces = 10
	// runLabel marks the Deployments and pods of this test, so the pod watch sees only them.
	runLabel = "kshard.io/e2e-rollout"
	ttl      = 9 * time.Second // the framework\'s default: above its failover budget (8.2s)
	margin   = time.Second
	// settle bounds how long a rollout step may take, a SIGKILLed shard's lease included.
	settle = 90 * time.Second
)

// fixture is one Deployment shape; minReadySeconds stretches its rollouts so that they
// are still going on when the namespaces move.
type fixture struct {
	name           string
	replicas       int32
	maxSurge       intstr.IntOrString
	maxUnavailable intstr.IntOrString
	minReady       int32
}

var fixtures = []fixture{
	{name: "surge-one", replicas: 4, maxSurge: intstr.FromInt32(1), maxUnavailable: intstr.FromInt32(0), minReady: 2},
	{name: "quarter", replicas: 4, maxSurge: intstr.FromString("25%"), maxUnavailable: intstr.FromString("25%"), minReady: 1},
	{name: "unavailable-one", replicas: 3, maxSurge: intstr.FromInt32(0), maxUnavailable: intstr.FromInt32(1), minReady: 2},
	{name: "half", replicas: 5, maxSurge: intstr.FromString("50%"), maxUnavailable: intstr.FromString("0%"), minReady: 1},
}

// workload is the set of Deployments a test created.
type workload struct {
	f     *framework.Framework
	run   string
	image int
	deps  []types.NamespacedName
}

// create makes n namespaces with two fixtures each (rotating through the shapes).
func create(t *testing.T, f *framework.Framework, n int) *workload {
	t.Helper()
	w := &workload{f: f, run: f.RunID + "-" + fmt.Sprint(time.Now().UnixNano()%1e6), image: 1}
	var mu sync.Mutex
	err := framework.Parallel(n, 16, func(i int) error {
		ns := f.Namespace(t, nil).Name
		for _, fx := range []fixture{fixtures[i%len(fixtures)], fixtures[(i+1)%len(fixtures)]} {
			d := framework.NewRollingDeployment(fx.name, fx.replicas, fx.maxSurge, fx.maxUnavailable, w.imageName(), map[string]string{runLabel: w.run})
			d.Labels = map[string]string{runLabel: w.run}
			d.Spec.MinReadySeconds = fx.minReady
			if _, err := f.Client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating Deployment %s/%s: %w", ns, fx.name, err)
			}
			mu.Lock()
			w.deps = append(w.deps, types.NamespacedName{Namespace: ns, Name: fx.name})
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *workload) selector() string { return runLabel + "=" + w.run }

func (w *workload) imageName() string {
	return fmt.Sprintf("registry.k8s.io/e2e/rollout:v%d", w.image)
}

// rollout changes the image of every Deployment, which starts a rolling update.
func (w *workload) rollout(t *testing.T) {
	t.Helper()
	w.image++
	patch := []byte(fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":%q}]`, w.imageName()))
	err := framework.Parallel(len(w.deps), 16, func(i int) error {
		d := w.deps[i]
		if _, err := w.f.Client.AppsV1().Deployments(d.Namespace).Patch(context.Background(), d.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("setting the image of %s: %w", d, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitComplete waits until every Deployment completed its latest rollout and returns how
// long that took.
func (w *workload) waitComplete(t *testing.T, what string) time.Duration {
	t.Helper()
	start := time.Now()
	framework.Eventually(t, settle, what+": every Deployment completed its rollout", func(ctx context.Context) (bool, error) {
		list, err := w.f.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: w.selector()})
		if err != nil {
			return false, err
		}
		if len(list.Items) != len(w.deps) {
			return false, fmt.Errorf("%d Deployments listed, %d created", len(list.Items), len(w.deps))
		}
		var pending []error
		for i := range list.Items {
			if err := framework.DeploymentComplete(&list.Items[i]); err != nil {
				pending = append(pending, err)
			}
		}
		if len(pending) > 0 {
			return false, fmt.Errorf("%d of %d not complete, e.g. %v", len(pending), len(w.deps), pending[0])
		}
		return true, nil
	})
	return time.Since(start)
}

// checkReplicaSets asserts that each Deployment's pods are all in its newest ReplicaSet.
func (w *workload) checkReplicaSets(t *testing.T) {
	t.Helper()
	list, err := w.f.Client.AppsV1().ReplicaSets(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: w.selector()})
	if err != nil {
		t.Fatal(err)
	}
	withPods := map[string][]string{}
	for _, rs := range list.Items {
		if rs.Status.Replicas > 0 || (rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0) {
			owner := metav1.GetControllerOf(&rs)
			if owner == nil {
				t.Errorf("ReplicaSet %s/%s has no controller", rs.Namespace, rs.Name)
				continue
			}
			key := rs.Namespace + "/" + owner.Name
			withPods[key] = append(withPods[key], rs.Name)
		}
	}
	for _, d := range w.deps {
		if rss := withPods[d.String()]; len(rss) != 1 {
			t.Errorf("Deployment %s: ReplicaSets with replicas %v, want exactly the new one", d, rss)
		}
	}
}

func assertNoSurge(t *testing.T, watch *framework.SurgeWatch) {
	t.Helper()
	r := watch.Report()
	t.Logf("pod watch: %s", r)
	for _, v := range r.Violations[:min(20, len(r.Violations))] {
		t.Errorf("%s", v)
	}
	if len(r.Violations) > 0 {
		t.Fatalf("%d observed instants with a ReplicaSet above replicas+maxSurge", len(r.Violations))
	}
	if r.Events == 0 {
		t.Fatal("the pod watch observed no pod events")
	}
}

func TestRolloutWhileNamespacesMove(t *testing.T) {
	f := framework.Get(t)
	f.RequireKCMWithout(t, "replicaset", "deployment")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	w := create(t, f, namespaces)
	watch, err := framework.WatchSurge(ctx, f.Client, w.selector())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Deployments in %d namespaces (%v)", len(w.deps), namespaces, fixtureNames())

	k := f.NewKShard(t, framework.KShardOptions{SessionTTL: ttl, Margin: margin,
		ShardArgs: []string{"--controllers", "replicaset,deployment", "-v=2"}})
	k.GuardAlone(t)
	k.StartCoordinator("coordinator-a")
	k.StartCoordinator("coordinator-b")
	for i := 1; i <= 3; i++ {
		k.StartShard(fmt.Sprintf("shard-%d", i))
	}
	took := w.waitComplete(t, "3 shards")
	t.Logf("3 shards: every Deployment available %s after the shards started", took.Round(time.Millisecond))
	owners := w.owners(t, k)

	step := func(name string, change func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			w.rollout(t)
			change(t)
			took := w.waitComplete(t, name)
			after := w.owners(t, k)
			t.Logf("%s: rollout to %s complete after %s; %d of %d namespaces changed shard meanwhile", name, w.imageName(), took.Round(time.Millisecond), moved(owners, after), namespaces)
			owners = after
			assertNoSurge(t, watch)
		})
	}
	step("scale out to 4 shards", func(*testing.T) { k.StartShard("shard-4") })
	step("graceful scale in", func(t *testing.T) {
		s := k.Shards["shard-1"]
		if err := s.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if exited, err := s.Wait(settle); !exited || err != nil {
			t.Fatalf("shard-1 after SIGTERM: exited %v, error %v; want a clean exit", exited, err)
		}
	})
	step("SIGKILL a shard", func(t *testing.T) {
		s := k.Shards["shard-2"]
		if err := s.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = s.Wait(10 * time.Second)
	})
	w.checkReplicaSets(t)
	assertNoSurge(t, watch)
}

// TestUpstreamSurgeReference runs the same kind of rollouts on the reference control
// plane, with upstream kube-controller-manager's controllers, and reports what the pod
// watch sees there. Upstream must not exceed the per-ReplicaSet bound either; its
// per-Deployment total is reported for docs/controllers.md.
func TestUpstreamSurgeReference(t *testing.T) {
	f := framework.Upstream(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := create(t, f, referenceNamespaces)
	watch, err := framework.WatchSurge(ctx, f.Client, w.selector())
	if err != nil {
		t.Fatal(err)
	}
	w.waitComplete(t, "upstream")
	for i := 0; i < 3; i++ {
		w.rollout(t)
		w.waitComplete(t, fmt.Sprintf("upstream rollout %d", i+1))
	}
	w.checkReplicaSets(t)
	assertNoSurge(t, watch)
}

func fixtureNames() []string {
	var out []string
	for _, fx := range fixtures {
		out = append(out, fmt.Sprintf("%s: %d replicas, maxSurge %s, maxUnavailable %s, minReadySeconds %d",
			fx.name, fx.replicas, fx.maxSurge.String(), fx.maxUnavailable.String(), fx.minReady))
	}
	sort.Strings(out)
	return out
}

// owners returns the shard that owns each of the workload's namespaces, as the
// coordinator leader reports it.
func (w *workload) owners(t *testing.T, k *framework.KShard) map[string]string {
	t.Helper()
	pmap := partition.Map{Count: partition.DefaultCount}
	out := map[string]string{}
	framework.Eventually(t, 30*time.Second, "the coordinator leader's assignments", func(ctx context.Context) (bool, error) {
		l, err := k.Leader(ctx)
		if err != nil {
			return false, err
		}
		a, err := l.Assignments(ctx)
		if err != nil {
			return false, err
		}
		byPartition := framework.Owners(a)
		for _, d := range w.deps {
			out[d.Namespace] = byPartition[uint32(pmap.For(d.Namespace))]
		}
		return true, nil
	})
	return out
}

func moved(before, after map[string]string) int {
	n := 0
	for ns, o := range after {
		if before[ns] != o {
			n++
		}
	}
	return n
}
