package volumes

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The API server's admission gives a new claim the finalizer; the controller gives it
// back to a claim that lost it while not being deleted.
func TestFinalizerAddedToAClaimWithout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.createClaim("data", "")
	if !hasFinalizer(c) {
		t.Logf("the API server did not add %s on create (StorageObjectInUseProtection off?)", finalizer)
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(context.Background(), "data", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitClaim("has the protection finalizer again", "data", hasFinalizer)
}

// A deleted claim keeps the finalizer while a running pod uses it, directly; a claim no
// pod uses (in the same namespace, deleted at the same time) goes at once, and so does
// the used one once its pod is gone.
func TestDeletedClaimKeptWhileAPodUsesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	used := e.createClaim("used", "")
	unused := e.createClaim("unused", "")
	e.createPod("user", onNode, withClaim("used"))
	e.waitRunning("user")
	e.deleteClaim("used")
	e.deleteClaim("unused")
	e.waitClaimGone("unused", unused.UID)
	// The unused claim went: its deletion was worked. The used one stays, deleted.
	c := e.waitClaim("being deleted, with the finalizer", "used", func(c *corev1.PersistentVolumeClaim) bool {
		return c.DeletionTimestamp != nil && hasFinalizer(c)
	})
	if c.UID != used.UID {
		t.Fatalf("claim used has uid %s, want %s", c.UID, used.UID)
	}
	e.deletePod("user")
	e.waitClaimGone("used", used.UID)
}

// A pod that is not bound to a node does not keep a deleted claim (the kubelet never saw
// it, and starts no pod of a claim being deleted).
func TestUnscheduledPodDoesNotKeepAClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.createClaim("data", "")
	e.createPod("waiting", unschedulable, withClaim("data"))
	e.deleteClaim("data")
	e.waitClaimGone("data", c.UID)
}

// A Bound claim carries the Unused condition: True while no pod names it, False once one
// does, True again when the pod is gone. The claim is bound to a hostPath volume of the
// test's own by the cluster's PV controller, and its pod is scheduled onto a kwok node.
func TestUnusedConditionOfABoundClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	class := "kshard-e2e-" + e.ns // a class of its own: no other test's claim binds the volume
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-pv"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claimSpec("").Resources.Requests[corev1.ResourceStorage]},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName:              class,
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + e.ns}},
	}}
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	e.createClaim("data", class)
	unused := func(status corev1.ConditionStatus, reason string) func(c *corev1.PersistentVolumeClaim) bool {
		return func(c *corev1.PersistentVolumeClaim) bool {
			for _, cond := range c.Status.Conditions {
				if cond.Type == corev1.PersistentVolumeClaimUnused {
					return c.Status.Phase == corev1.ClaimBound && cond.Status == status && cond.Reason == reason
				}
			}
			return false
		}
	}
	e.waitClaim("Bound, Unused True (NoPodsUsingPVC)", "data", unused(corev1.ConditionTrue, "NoPodsUsingPVC"))
	e.createPod("user", scheduled, withClaim("data"))
	e.waitClaim("Unused False (PodUsingPVC)", "data", unused(corev1.ConditionFalse, "PodUsingPVC"))
	e.waitRunning("user")
	e.deletePod("user")
	e.waitClaim("Unused True again", "data", unused(corev1.ConditionTrue, "NoPodsUsingPVC"))
}

// The claims of many pods in one namespace, deleted together while their pods run, all
// stay; once the pods go, all go.
func TestManyClaimsOfOneNamespace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 10
	uids := map[string]types.UID{}
	for i := range n {
		name := "data-" + string(rune('a'+i))
		uids[name] = e.createClaim(name, "").UID
		e.createPod("user-"+string(rune('a'+i)), onNode, withClaim(name))
	}
	for i := range n {
		e.waitRunning("user-" + string(rune('a'+i)))
	}
	for name := range uids {
		e.deleteClaim(name)
	}
	if err := e.cs.CoreV1().Pods(e.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, uid := range uids {
		e.waitClaimGone(name, uid)
	}
	framework.Eventually(t, timeout, "no pod left", func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
}
