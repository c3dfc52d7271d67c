package gcquota

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// TestShardedCascades: cascading deletions, in the background and in the foreground, of
// Deployments (Deployment → ReplicaSet → pods), of a custom resource owner and of
// cluster-scoped owners whose dependents live in every namespace (the one deleted in the
// foreground goes exactly after its last blocking dependent), and an orphaning, while
// a shard is SIGKILLed and its namespaces move to the others and to a new shard. Then,
// with every shard down, owners are deleted; the shards that start afterwards collect
// their dependents. Nothing is left behind; nothing that was not to be deleted is (the
// "keep" Deployments' ReplicaSets and pods keep their UIDs); foreground deletions end in
// etcd's order (pods, then the ReplicaSet, then the Deployment); no orphan or
// foregroundDeletion finalizer is left. Not parallel: it kills the package's shards.
func TestShardedCascades(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the garbage collector: no shard to kill")
	}
	const namespaces = 6
	first := newEnv(t)
	things := first.crd("Thing", "Namespaced")
	owners := first.crd("Owner", "Cluster")
	clusterOwner := first.custom(owners, "Owner", "", "o-"+first.ns)
	// A cluster-scoped owner deleted in the foreground, whose blocking dependents live in
	// every namespace: it must go exactly after the last of them, held by a finalizer in
	// the first namespace until the end.
	fgOwner := first.custom(owners, "Owner", "", "fg-"+first.ns)
	ownerDeletions := first.watchDeletions("", owners)

	type nsState struct {
		e        *env
		seen     *deletions
		fgRS     string // the foreground-deleted Deployment's ReplicaSet
		keepRS   string
		keepPods map[string]types.UID
		orphans  []string // pods of the ReplicaSet deleted with orphan
		orphanRS string
	}
	var all []*nsState
	for i := range namespaces {
		e := first
		if i > 0 {
			e = newEnv(t)
		}
		st := &nsState{e: e, keepPods: map[string]types.UID{}}
		_, fg, _ := e.webDeployment("fg", 2)
		st.fgRS = fg.Name
		e.webDeployment("bg", 2)
		_, keep, _ := e.webDeployment("keep", 1)
		st.keepRS = keep.Name
		ps, err := e.cs.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=keep"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Items {
			st.keepPods[p.Name] = p.UID
		}
		_, orphan, orphans := e.webDeployment("orphan", 1)
		st.orphanRS, st.orphans = orphan.Name, orphans
		owner := e.custom(things, "Thing", e.ns, "owner")
		e.configMap(e.ns, "of-thing", false, ref(owner, things.GroupVersion().String(), "Thing", true))
		e.configMap(e.ns, "of-cluster-owner", false, ref(clusterOwner, owners.GroupVersion().String(), "Owner", false))
		e.configMap(e.ns, "of-fg-owner", i == 0, ref(fgOwner, owners.GroupVersion().String(), "Owner", true))
		st.seen = e.watchDeletions(e.ns, deployments, replicaSets, pods, configMaps)
		all = append(all, st)
	}

	first.del(owners, "", fgOwner.GetName(), ptr.To(metav1.DeletePropagationForeground))
	for i, st := range all {
		e := st.e
		e.del(deployments, e.ns, "fg", ptr.To(metav1.DeletePropagationForeground))
		e.del(deployments, e.ns, "bg", ptr.To(metav1.DeletePropagationBackground))
		// Orphan the ReplicaSet from its Deployment and its pods from it.
		e.del(deployments, e.ns, "orphan", ptr.To(metav1.DeletePropagationOrphan))
		policy := metav1.DeletePropagationBackground
		if i%2 == 0 {
			policy = metav1.DeletePropagationForeground
		}
		e.del(things, e.ns, "owner", &policy)
		if i == namespaces/2 {
			// Halfway through the deletions, a shard dies and a new one starts: the
			// namespaces move while their cascades run.
			victim := liveShard(c.KShard)
			t.Logf("SIGKILL of %s", victim.Name)
			_ = victim.Signal(syscall.SIGKILL)
			c.KShard.StartShard(fmt.Sprintf("%s-replacement-%d", victim.Name, time.Now().Unix()%1000))
		}
	}
	first.del(owners, "", clusterOwner.GetName(), ptr.To(metav1.DeletePropagationBackground))
	for _, st := range all {
		e := st.e
		e.waitGone(deployments, e.ns, "orphan")
		e.del(replicaSets, e.ns, st.orphanRS, ptr.To(metav1.DeletePropagationOrphan))
	}

	for _, st := range all {
		e := st.e
		for _, d := range []string{"fg", "bg"} {
			e.waitGone(deployments, e.ns, d)
		}
		e.waitGone(replicaSets, e.ns, st.orphanRS)
		e.waitGone(things, e.ns, "owner")
		for _, cm := range []string{"of-thing", "of-cluster-owner"} {
			e.waitGone(configMaps, e.ns, cm)
		}
		if e != first {
			e.waitGone(configMaps, e.ns, "of-fg-owner")
		}
		framework.Eventually(t, collectTimeout, "only the keep and orphaned ReplicaSets' pods left in "+e.ns, func(ctx context.Context) (bool, error) {
			rss, err := e.names(ctx, replicaSets, e.ns)
			if err != nil || !slices.Equal(rss, []string{st.keepRS}) {
				return false, err
			}
			ps, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			return len(ps.Items) == len(st.keepPods)+len(st.orphans), nil
		})
	}

	for _, st := range all {
		e := st.e
		ctx := context.Background()
		ps, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Items {
			if uid, keep := st.keepPods[p.Name]; keep && uid != p.UID {
				t.Errorf("%s/%s: a keep pod was replaced (UID %s, was %s): it was deleted", e.ns, p.Name, p.UID, uid)
			}
			if slices.Contains(st.orphans, p.Name) && len(p.OwnerReferences) > 0 {
				t.Errorf("%s/%s: orphaned pod still has owner references %v", e.ns, p.Name, p.OwnerReferences)
			}
			if len(p.Finalizers) > 0 {
				t.Errorf("%s/%s: finalizers %v left", e.ns, p.Name, p.Finalizers)
			}
		}
		rsAt, dAt := st.seen.at("replicasets", st.fgRS), st.seen.at("deployments", "fg")
		if rsAt == 0 || dAt == 0 || rsAt > dAt {
			t.Errorf("%s: foreground Deployment deleted at resourceVersion %d, its ReplicaSet at %d: want the ReplicaSet first", e.ns, dAt, rsAt)
		}
		if st.seen.at("replicasets", st.keepRS) != 0 {
			t.Errorf("%s: the keep Deployment's ReplicaSet was deleted", e.ns)
		}
	}

	// The foreground cluster-scoped owner waits for its last blocking dependent, held in
	// the first namespace, and goes once it is released; etcd deleted it after that
	// dependent.
	if o, err := first.get(context.Background(), owners, "", fgOwner.GetName()); err != nil || o == nil || !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("the foreground cluster-scoped owner while a blocking dependent is held: %v (err %v); want it kept with %s", o, err, metav1.FinalizerDeleteDependents)
	}
	first.release(configMaps, first.ns, "of-fg-owner")
	first.waitGone(owners, "", fgOwner.GetName())
	framework.Eventually(t, 10*time.Second, "the owner's and its held dependent's deletions seen", func(context.Context) (bool, error) {
		return ownerDeletions.at("things", fgOwner.GetName()) > 0 && all[0].seen.at("configmaps", "of-fg-owner") > 0, nil
	})
	if d, o := all[0].seen.at("configmaps", "of-fg-owner"), ownerDeletions.at("things", fgOwner.GetName()); o < d {
		t.Errorf("the foreground cluster-scoped owner was deleted at resourceVersion %d, before its blocking dependent (%d)", o, d)
	}
	for _, st := range all[1:] {
		if d, o := st.seen.at("configmaps", "of-fg-owner"), ownerDeletions.at("things", fgOwner.GetName()); d == 0 || o < d {
			t.Errorf("%s: the foreground cluster-scoped owner deleted at %d, its dependent at %d: want the dependent first", st.e.ns, o, d)
		}
	}

	// Every shard down; owners deleted while no garbage collector runs; the shards that
	// start afterwards collect the dependents.
	var live []*framework.Shard
	for _, s := range c.KShard.Shards {
		if !s.Exited() {
			live = append(live, s)
		}
	}
	for _, s := range live {
		_ = s.Signal(syscall.SIGKILL)
	}
	for _, s := range live {
		if ok, _ := s.Wait(10 * time.Second); !ok {
			t.Fatalf("%s still runs after SIGKILL", s.Name)
		}
	}
	e := all[0].e
	owner := e.configMap(e.ns, "down-owner", false)
	e.configMap(e.ns, "down-dependent", false, ref(owner, "v1", "ConfigMap", false))
	e.del(configMaps, e.ns, "down-owner", ptr.To(metav1.DeletePropagationBackground))
	if o, err := e.get(context.Background(), configMaps, e.ns, "down-dependent"); err != nil || o == nil {
		t.Fatalf("a dependent while no garbage collector runs: %v, err %v; want it still there", o, err)
	}
	for _, s := range live {
		c.KShard.StartShard(fmt.Sprintf("%s-restart-%d", s.Name, time.Now().Unix()%1000))
	}
	e.waitGone(configMaps, e.ns, "down-dependent")
	c.KShard.WaitAllOwned(t, 90*time.Second)
}

// liveShard returns a shard of k that runs.
func liveShard(k *framework.KShard) *framework.Shard {
	for _, s := range k.Shards {
		if !s.Exited() {
			return s
		}
	}
	return nil
}
