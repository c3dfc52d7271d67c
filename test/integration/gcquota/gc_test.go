package gcquota

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// TestBackgroundCascade: deleting a Deployment in the background removes it at once, then
// its ReplicaSet, then the ReplicaSet's pods.
func TestBackgroundCascade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d, rs, podNames := e.webDeployment("web", 2)
	e.del(deployments, e.ns, d.Name, ptr.To(metav1.DeletePropagationBackground))
	e.waitGone(replicaSets, e.ns, rs.Name)
	for _, p := range podNames {
		e.waitGone(pods, e.ns, p)
	}
}

// TestForegroundCascade: deleting a Deployment in the foreground keeps it, with the
// foregroundDeletion finalizer, until its ReplicaSet is gone, and the ReplicaSet (deleted
// in the foreground too) until its pods are: etcd deletes the pods first, then the
// ReplicaSet, then the Deployment. No finalizer is left behind.
func TestForegroundCascade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d, rs, podNames := e.webDeployment("web", 2)
	seen := e.watchDeletions(e.ns, deployments, replicaSets, pods)
	e.del(deployments, e.ns, d.Name, ptr.To(metav1.DeletePropagationForeground))
	o, err := e.get(context.Background(), deployments, e.ns, d.Name)
	if err != nil || o == nil || !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("Deployment right after its foreground deletion: %v (err %v), want it kept with %s", o, err, metav1.FinalizerDeleteDependents)
	}
	e.waitGone(deployments, e.ns, d.Name)
	framework.Eventually(t, 10*time.Second, "the deletions seen by the watches", func(context.Context) (bool, error) {
		_, n := seen.last("pods")
		return n == len(podNames) && seen.at("replicasets", rs.Name) > 0 && seen.at("deployments", d.Name) > 0, nil
	})
	lastPod, _ := seen.last("pods")
	rsAt, dAt := seen.at("replicasets", rs.Name), seen.at("deployments", d.Name)
	if !(lastPod < rsAt && rsAt < dAt) {
		t.Errorf("deletion order (resourceVersions): last pod %d, ReplicaSet %d, Deployment %d; want pods, then the ReplicaSet, then the Deployment", lastPod, rsAt, dAt)
	}
}

// TestOrphan: deleting a ReplicaSet with propagation Orphan leaves its pods, their owner
// references to it removed, and removes the orphan finalizer.
func TestOrphan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d, rs, podNames := e.webDeployment("web", 2)
	// Orphan the ReplicaSet from the Deployment first (the Deployment would otherwise
	// make a new one), then the pods from the ReplicaSet.
	e.del(deployments, e.ns, d.Name, ptr.To(metav1.DeletePropagationOrphan))
	e.waitGone(deployments, e.ns, d.Name)
	e.del(replicaSets, e.ns, rs.Name, ptr.To(metav1.DeletePropagationOrphan))
	e.waitGone(replicaSets, e.ns, rs.Name)
	framework.Eventually(t, collectTimeout, "orphaned pods without owner references", func(ctx context.Context) (bool, error) {
		for _, name := range podNames {
			p, err := e.get(ctx, pods, e.ns, name)
			if err != nil || p == nil {
				t.Fatalf("orphaned pod %s: %v, err %v; want it kept", name, p, err)
			}
			if len(p.OwnerReferences) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// TestVirtualOwners: a dependent whose owner never existed (no object of that name) or
// is another object (same name, another UID) is collected; one whose owner exists is kept.
func TestVirtualOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := e.configMap(e.ns, "owner", false)
	solid := e.configMap(e.ns, "solid", false, ref(owner, "v1", "ConfigMap", false))
	e.configMap(e.ns, "never", false, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "nobody", UID: types.UID("0c4e58d2-52b7-4a5e-9c38-000000000001")})
	e.configMap(e.ns, "other-uid", false, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: types.UID("0c4e58d2-52b7-4a5e-9c38-000000000002")})
	e.waitGone(configMaps, e.ns, "never")
	e.waitGone(configMaps, e.ns, "other-uid")
	if o, err := e.get(context.Background(), configMaps, e.ns, solid.Name); err != nil || o == nil {
		t.Errorf("the dependent of an existing owner: %v, err %v; want it kept", o, err)
	}
}

// TestBlockOwnerDeletion: an owner deleted in the foreground waits for its dependents
// with blockOwnerDeletion, and not for those without; both are deleted.
func TestBlockOwnerDeletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := e.configMap(e.ns, "owner", false)
	e.configMap(e.ns, "blocking", true, ref(owner, "v1", "ConfigMap", true))
	e.configMap(e.ns, "free", true, ref(owner, "v1", "ConfigMap", false))
	e.del(configMaps, e.ns, "owner", ptr.To(metav1.DeletePropagationForeground))
	framework.Eventually(t, collectTimeout, "both dependents being deleted", func(ctx context.Context) (bool, error) {
		for _, n := range []string{"blocking", "free"} {
			o, err := e.get(ctx, configMaps, e.ns, n)
			if err != nil || o == nil || o.DeletionTimestamp == nil {
				return false, err
			}
		}
		return true, nil
	})
	if o, err := e.get(context.Background(), configMaps, e.ns, "owner"); err != nil || o == nil {
		t.Fatalf("owner while its blocking dependent is held: %v, err %v; want it kept", o, err)
	}
	e.release(configMaps, e.ns, "blocking")
	e.waitGone(configMaps, e.ns, "owner") // "free" still held: it does not block
	if o, err := e.get(context.Background(), configMaps, e.ns, "free"); err != nil || o == nil {
		t.Errorf("the non-blocking dependent: %v, err %v; want it still held", o, err)
	}
}

// TestCrossNamespaceOwner: a namespaced dependent whose owner reference names an object
// of another namespace is refused: a Warning event OwnerRefInvalidNamespace on it, and
// it is collected (its owner does not exist in its own namespace).
func TestCrossNamespaceOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.namespace()
	owner := e.configMap(other, "owner", false)
	e.configMap(e.ns, "dependent", false, ref(owner, "v1", "ConfigMap", false))
	e.waitGone(configMaps, e.ns, "dependent")
	framework.Eventually(t, 30*time.Second, "the OwnerRefInvalidNamespace event", func(ctx context.Context) (bool, error) {
		reasons, err := e.eventReasons(ctx, e.ns, "ConfigMap", "dependent")
		return slices.Contains(reasons, "OwnerRefInvalidNamespace"), err
	})
	if o, err := e.get(context.Background(), configMaps, other, "owner"); err != nil || o == nil {
		t.Errorf("the other namespace's object: %v, err %v; want it untouched", o, err)
	}
}

// TestNewCRD: a CRD created while the controllers run: its objects are collected when
// their owner goes (within the discovery period).
func TestNewCRD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	things := e.crd("Thing", "Namespaced")
	owner := e.custom(things, "Thing", e.ns, "owner")
	e.custom(things, "Thing", e.ns, "dependent", ref(owner, things.GroupVersion().String(), "Thing", false))
	cm := e.configMap(e.ns, "cm-of-thing", false, ref(owner, things.GroupVersion().String(), "Thing", false))
	e.del(things, e.ns, "owner", ptr.To(metav1.DeletePropagationBackground))
	e.waitGone(things, e.ns, "dependent")
	e.waitGone(configMaps, e.ns, cm.Name)
}

// TestClusterScopedOwner: namespaced dependents, in three namespaces (so, with kshard,
// on several shards), of cluster-scoped owners: deleted in the background, they are
// collected; in the foreground, the owner stays until the last blocking dependent is gone
// (one is held by a finalizer: the owner waits for it, then goes); orphaned, they stay
// with the reference removed, and the owner goes without its orphan finalizer.
func TestClusterScopedOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owners := e.crd("Owner", "Cluster")
	gv := owners.GroupVersion().String()
	bg := e.custom(owners, "Owner", "", "bg-"+e.ns)
	fg := e.custom(owners, "Owner", "", "fg-"+e.ns)
	orphan := e.custom(owners, "Owner", "", "orphan-"+e.ns)
	nss := []string{e.ns, e.namespace(), e.namespace()}
	for i, ns := range nss {
		e.configMap(ns, "of-bg", false, ref(bg, gv, "Owner", false))
		e.configMap(ns, "of-fg", i == 2, ref(fg, gv, "Owner", true))
		e.configMap(ns, "of-orphan", false, ref(orphan, gv, "Owner", true))
	}
	e.del(owners, "", bg.GetName(), ptr.To(metav1.DeletePropagationBackground))
	e.del(owners, "", fg.GetName(), ptr.To(metav1.DeletePropagationForeground))
	e.del(owners, "", orphan.GetName(), ptr.To(metav1.DeletePropagationOrphan))
	for _, ns := range nss {
		e.waitGone(configMaps, ns, "of-bg")
	}
	for _, ns := range nss[:2] {
		e.waitGone(configMaps, ns, "of-fg")
	}
	e.waitGone(owners, "", orphan.GetName())
	for _, ns := range nss {
		o, err := e.get(context.Background(), configMaps, ns, "of-orphan")
		if err != nil || o == nil || len(o.OwnerReferences) != 0 || o.DeletionTimestamp != nil {
			t.Errorf("%s/of-orphan after its owner was orphan-deleted: %v (err %v); want it kept, without owner references", ns, o, err)
		}
	}
	// The held dependent is being deleted; its owner waits for it.
	framework.Eventually(t, collectTimeout, "the held dependent being deleted", func(ctx context.Context) (bool, error) {
		o, err := e.get(ctx, configMaps, nss[2], "of-fg")
		return err == nil && o != nil && o.DeletionTimestamp != nil, err
	})
	if o, err := e.get(context.Background(), owners, "", fg.GetName()); err != nil || o == nil || !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("foreground owner while a blocking dependent is held: %v (err %v); want it kept with %s", o, err, metav1.FinalizerDeleteDependents)
	}
	e.release(configMaps, nss[2], "of-fg")
	e.waitGone(owners, "", fg.GetName())
}

// TestClusterScopedDependent: a cluster-scoped dependent of a namespaced owner is never
// collected (such a reference is invalid; upstream leaves the object); one of a
// cluster-scoped owner is, once the owner goes.
func TestClusterScopedDependent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owners := e.crd("Owner", "Cluster")
	owner := e.custom(owners, "Owner", "", "o-"+e.ns)
	cm := e.configMap(e.ns, "namespaced-owner", false)
	byCluster := e.custom(owners, "Owner", "", "d-"+e.ns, ref(owner, owners.GroupVersion().String(), "Owner", false))
	byNamespaced := e.custom(owners, "Owner", "", "n-"+e.ns, ref(cm, "v1", "ConfigMap", false))
	t.Cleanup(func() {
		_ = e.dyn.Resource(owners).Delete(context.Background(), byNamespaced.GetName(), metav1.DeleteOptions{})
	})
	e.del(owners, "", owner.GetName(), ptr.To(metav1.DeletePropagationBackground))
	e.waitGone(owners, "", byCluster.GetName())
	// The ConfigMap's namespaced dependent is the marker: once the collector has
	// collected it, it has worked the owner's deletion, whose dependents it enqueues
	// together.
	e.configMap(e.ns, "sibling", false, ref(cm, "v1", "ConfigMap", false))
	e.del(configMaps, e.ns, cm.Name, ptr.To(metav1.DeletePropagationBackground))
	e.waitGone(configMaps, e.ns, "sibling")
	if o, err := e.get(context.Background(), owners, "", byNamespaced.GetName()); err != nil || o == nil {
		t.Errorf("the cluster-scoped dependent of a namespaced owner: %v, err %v; want it never collected", o, err)
	}
}

// TestNamespacePropagation: a Namespace deleted in the foreground or with orphaning loses
// the garbage collector's finalizer and goes, whichever shard owns the namespace's
// partition: the collector works a Namespace, like every cluster-scoped object, on the
// cluster partition, and its patch of the Namespace's finalizers is that partition's write
// (gate.RequestNamespace). Each Namespace owns a ConfigMap elsewhere: the foreground one's
// is deleted, the orphan one's kept without its reference. Four of each, so that some
// are (but for a 3^-8 chance) in partitions of shards that do not hold the cluster partition.
func TestNamespacePropagation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type owned struct{ ns, dependent string }
	byPolicy := map[metav1.DeletionPropagation][]owned{}
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		for range 4 {
			ns := e.f.Namespace(t, nil)
			cm := e.configMap(e.ns, "of-"+ns.Name, false, ref(ns, "v1", "Namespace", false))
			e.del(namespaces, "", ns.Name, ptr.To(policy))
			byPolicy[policy] = append(byPolicy[policy], owned{ns.Name, cm.Name})
		}
	}
	for policy, all := range byPolicy {
		for _, o := range all {
			e.waitGone(namespaces, "", o.ns)
			if policy == metav1.DeletePropagationForeground {
				e.waitGone(configMaps, e.ns, o.dependent)
				continue
			}
			cm, err := e.get(context.Background(), configMaps, e.ns, o.dependent)
			if err != nil || cm == nil || len(cm.OwnerReferences) != 0 {
				t.Errorf("ConfigMap %s/%s of the Namespace %s deleted with orphaning: %v (err %v), want it kept without owner references", e.ns, o.dependent, o.ns, cm, err)
			}
		}
	}
}
