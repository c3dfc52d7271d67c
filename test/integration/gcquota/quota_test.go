package gcquota

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// quotaTimeout bounds how long the controller may take to write a quota's status: the
// discovery period of a CRD created during the test (30 s upstream) and its work.
const quotaTimeout = 90 * time.Second

// quota creates ResourceQuota name in ns.
func (e *env) quota(ns, name string, hard corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) {
	e.t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes}}
	if _, err := e.cs.CoreV1().ResourceQuotas(ns).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating ResourceQuota %s: %v", name, err)
	}
}

// waitUsed waits until quota ns/name's status has hard equal to its spec and used equal
// to want, exactly (the same resource names, equal quantities).
func (e *env) waitUsed(ns, name string, want corev1.ResourceList) {
	e.t.Helper()
	var last string
	err := waitFor(quotaTimeout, func(ctx context.Context) (bool, error) {
		q, err := e.cs.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("hard %s, used %s", list(q.Status.Hard), list(q.Status.Used))
		return equal(q.Status.Hard, q.Spec.Hard) && equal(q.Status.Used, want), nil
	})
	if err != nil {
		e.t.Fatalf("quota %s/%s: want used %s; last status %s", ns, name, list(want), last)
	}
}

func waitFor(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if ok, err := cond(ctx); err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func list(l corev1.ResourceList) string {
	var out []string
	for k, v := range l {
		out = append(out, string(k)+"="+v.String())
	}
	sort.Strings(out)
	return "{" + strings.Join(out, " ") + "}"
}

// waitCounted waits until quota ns/name's status.used counts r, the count of a resource
// served since a moment ago. The admission plugin refuses what a quota tracks until the
// controller has counted it, and the controller counts a resource it discovered only at
// the quota's next sync (upstream: the next full recalculation, every 5 minutes by
// default), so each poll that finds it uncounted changes the quota's spec.hard of r, which
// syncs the quota.
func (e *env) waitCounted(ns, name string, r corev1.ResourceName) {
	e.t.Helper()
	e.waitSynced(ns, name, r, fmt.Sprintf("counting %s", r), false, func(_ context.Context, q *corev1.ResourceQuota) (bool, error) {
		_, ok := q.Status.Used[r]
		return ok, nil
	})
}

// waitSynced waits until quota ns/name's status is of its spec (status.hard equal to
// spec.hard: no recount the test asked for is still due) and counted holds, on two polls
// in a row with no write of the quota between them. Each poll that finds the status of
// the spec but counted false, and the first such poll when force is set, toggles the
// quota's spec.hard of bump, an integer count, between an even value and the next odd
// one: an update that makes the controller count the quota again from its informers
// (upstream recounts on a spec change, on a deletion or update that frees usage and at
// every full resync, 5 minutes by default; never on a creation, which admission charges
// against the status). A recount from an informer a few milliseconds behind a creation
// drops that creation's charge until the next recount, upstream's as kshard's; the two
// quiet polls (200 ms) are a heuristic against a recount still queued when the test goes
// on to create what admission is to charge: one that changes nothing writes nothing.
func (e *env) waitSynced(ns, name string, bump corev1.ResourceName, what string, force bool, counted func(context.Context, *corev1.ResourceQuota) (bool, error)) {
	e.t.Helper()
	var settled string // the quota's resourceVersion when counted last held
	toggled := false
	framework.Eventually(e.t, quotaTimeout, fmt.Sprintf("quota %s/%s %s", ns, name, what), func(ctx context.Context) (bool, error) {
		q, err := e.cs.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		synced := equal(q.Status.Hard, q.Spec.Hard)
		if synced && (toggled || !force) {
			ok, err := counted(ctx, q)
			if err != nil {
				return false, err
			}
			if ok {
				done := settled == q.ResourceVersion
				settled = q.ResourceVersion
				return done, nil
			}
		}
		settled = ""
		if !synced {
			return false, nil // the first status, or the last toggle's recount, is still due
		}
		hard, ok := q.Spec.Hard[bump]
		if !ok || hard.Value()*1000 != hard.MilliValue() {
			e.t.Fatalf("quota %s/%s has no integer hard %s to change (%v)", ns, name, bump, q.Spec.Hard)
		}
		n := hard.Value()
		if n%2 == 0 {
			n++
		} else {
			n--
		}
		why := "not yet " + what
		if force && !toggled {
			why = "to check it is " + what
		}
		e.t.Logf("quota %s/%s %s (used %s): hard %s to %d, to make the controller count again", ns, name, why, list(q.Status.Used), bump, n)
		q.Spec.Hard[bump] = *resource.NewQuantity(n, resource.DecimalSI)
		toggled = true
		_, err = e.cs.CoreV1().ResourceQuotas(ns).Update(ctx, q, metav1.UpdateOptions{})
		return false, err
	})
}

// waitRecounted is waitUsed for usage that admission charged: it makes the controller
// count quota ns/name again (waitSynced, changing bump, at least once) and waits until
// the status has hard equal to its spec and used equal to want. What the test checks is
// the controller's count, not the API server's admission charges.
func (e *env) waitRecounted(ns, name string, bump corev1.ResourceName, want corev1.ResourceList) {
	e.t.Helper()
	e.waitSynced(ns, name, bump, "using "+list(want), true, func(_ context.Context, q *corev1.ResourceQuota) (bool, error) {
		return equal(q.Status.Used, want), nil
	})
}

// waitRootCA waits until the namespace's kube-root-ca.crt is published, before a test
// creates a quota that counts ConfigMaps, so that the test knows which ConfigMaps exist
// when the quota is created; waitCountsLive then waits until the controller counted them.
func (e *env) waitRootCA() {
	e.t.Helper()
	framework.Eventually(e.t, quotaTimeout, "kube-root-ca.crt published", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().ConfigMaps(e.ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, err
	})
}

// waitCountsLive waits until quota ns/name's status counts exactly the ConfigMaps the API
// server lists, in each of configmaps and count/configmaps that it tracks, changing the
// quota's hard bump until it does (waitSynced; force: at least once). The namespace's
// kube-root-ca.crt, published before the quota's first status, can be missing from the
// controller's first count (its ConfigMap informer behind the quota's), upstream's as
// kshard's, and nothing but a recount adds it: admission charges only what is created
// once the status names configmaps.
func (e *env) waitCountsLive(ns, name string, bump corev1.ResourceName, force bool) {
	e.t.Helper()
	e.waitSynced(ns, name, bump, "counting the live ConfigMaps", force, func(ctx context.Context, q *corev1.ResourceQuota) (bool, error) {
		cms, err := e.names(ctx, configMaps, ns)
		if err != nil {
			return false, err
		}
		tracked := 0
		for _, r := range []corev1.ResourceName{"configmaps", "count/configmaps"} {
			if _, ok := q.Spec.Hard[r]; !ok {
				continue
			}
			tracked++
			if used, ok := q.Status.Used[r]; !ok || used.Value() != int64(len(cms)) {
				return false, nil
			}
		}
		if tracked == 0 {
			e.t.Fatalf("quota %s/%s tracks no ConfigMaps", ns, name)
		}
		return true, nil
	})
}

// pod creates a pod in ns with requests and limits (nil: BestEffort).
func (e *env) pod(ns, name string, requests, limits corev1.ResourceList, deadline *int64) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ActiveDeadlineSeconds:         deadline,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// TestQuotaUsage: a quota over compute resources (extended ones included), object counts
// (legacy names and count/<resource>.<group>, a CRD created during the test among them),
// services by type and storage by class shows exactly what its namespace uses.
func TestQuotaUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	things := e.crd("Thing", "Namespaced")
	thingsCount := "count/" + things.Resource + "." + things.Group
	hard := rl("pods", "10", "count/pods", "10", "requests.cpu", "4", "requests.memory", "4Gi", "limits.cpu", "8", "limits.memory", "8Gi",
		"requests.example.com/dongle", "4",
		"configmaps", "20", "count/configmaps", "20", "secrets", "20",
		"services", "5", "services.nodeports", "5", "services.loadbalancers", "5",
		"persistentvolumeclaims", "5", "requests.storage", "20Gi",
		"gold.storageclass.storage.k8s.io/requests.storage", "10Gi", "gold.storageclass.storage.k8s.io/persistentvolumeclaims", "5",
		"count/deployments.apps", "5", thingsCount, "5")
	e.waitRootCA()
	e.quota(e.ns, "all", hard)
	e.f.WaitDefaultServiceAccount(t, e.ns)
	e.waitCounted(e.ns, "all", corev1.ResourceName(thingsCount))

	e.pod(e.ns, "a", rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "200m", "memory", "128Mi"), nil)
	e.pod(e.ns, "b", rl("cpu", "250m", "memory", "128Mi", "example.com/dongle", "1"), rl("cpu", "250m", "memory", "128Mi", "example.com/dongle", "1"), nil)
	for _, n := range []string{"c1", "c2"} {
		e.configMap(e.ns, n, false)
	}
	if _, err := e.cs.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := []corev1.ServicePort{{Port: 80}}
	for name, typ := range map[string]corev1.ServiceType{"cip": corev1.ServiceTypeClusterIP, "np": corev1.ServiceTypeNodePort, "lb": corev1.ServiceTypeLoadBalancer} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: typ, Ports: port}}
		if _, err := e.cs.CoreV1().Services(e.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, class := range map[string]string{"gold": "gold", "std": "standard"} {
		size := map[string]string{"gold": "1Gi", "std": "2Gi"}[name]
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: rl("storage", size)},
		}}
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "none"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "zero"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}},
	}}
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.custom(things, "Thing", e.ns, "t1")
	e.custom(things, "Thing", e.ns, "t2")

	// ConfigMaps: the test's, and kube-root-ca.crt where a root CA publisher runs.
	cms, err := e.names(ctx, configMaps, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	n := fmt.Sprint(len(cms))
	e.waitRecounted(e.ns, "all", "secrets", rl("pods", "2", "count/pods", "2", "requests.cpu", "350m", "requests.memory", "192Mi", "limits.cpu", "450m", "limits.memory", "256Mi",
		"requests.example.com/dongle", "1",
		"configmaps", n, "count/configmaps", n, "secrets", "1",
		"services", "3", "services.nodeports", "2", "services.loadbalancers", "1",
		"persistentvolumeclaims", "2", "requests.storage", "3Gi",
		"gold.storageclass.storage.k8s.io/requests.storage", "1Gi", "gold.storageclass.storage.k8s.io/persistentvolumeclaims", "1",
		"count/deployments.apps", "1", thingsCount, "2"))

	// Deleting releases: pods, a service, a PVC, a CRD object.
	for _, del := range []error{
		e.cs.CoreV1().Pods(e.ns).Delete(ctx, "b", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}),
		e.cs.CoreV1().Services(e.ns).Delete(ctx, "np", metav1.DeleteOptions{}),
		e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, "gold", metav1.DeleteOptions{}),
		e.dyn.Resource(things).Namespace(e.ns).Delete(ctx, "t1", metav1.DeleteOptions{}),
	} {
		if del != nil {
			t.Fatal(del)
		}
	}
	// A PVC with the kubernetes.io/pvc-protection finalizer is counted until it goes;
	// no controller removes it here, so release it as the protection controller would.
	e.release(pvcs, e.ns, "gold")
	e.waitUsed(e.ns, "all", rl("pods", "1", "count/pods", "1", "requests.cpu", "100m", "requests.memory", "64Mi", "limits.cpu", "200m", "limits.memory", "128Mi",
		"requests.example.com/dongle", "0",
		"configmaps", n, "count/configmaps", n, "secrets", "1",
		"services", "2", "services.nodeports", "1", "services.loadbalancers", "1",
		"persistentvolumeclaims", "1", "requests.storage", "2Gi",
		"gold.storageclass.storage.k8s.io/requests.storage", "0", "gold.storageclass.storage.k8s.io/persistentvolumeclaims", "0",
		"count/deployments.apps", "1", thingsCount, "1"))
}

// TestQuotaScopes: quotas scoped to BestEffort, NotBestEffort, Terminating and
// NotTerminating pods, and one with a scope selector, count only their pods.
func TestQuotaScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.quota(e.ns, "besteffort", rl("pods", "5"), corev1.ResourceQuotaScopeBestEffort)
	e.quota(e.ns, "notbesteffort", rl("pods", "5", "requests.cpu", "2"), corev1.ResourceQuotaScopeNotBestEffort)
	e.quota(e.ns, "terminating", rl("pods", "5"), corev1.ResourceQuotaScopeTerminating)
	e.quota(e.ns, "notterminating", rl("pods", "5"), corev1.ResourceQuotaScopeNotTerminating)
	sel := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "selector"}, Spec: corev1.ResourceQuotaSpec{
		Hard: rl("pods", "5"),
		ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopeNotTerminating, Operator: corev1.ScopeSelectorOpExists,
		}, {
			ScopeName: corev1.ResourceQuotaScopeNotBestEffort, Operator: corev1.ScopeSelectorOpExists,
		}}},
	}}
	if _, err := e.cs.CoreV1().ResourceQuotas(e.ns).Create(context.Background(), sel, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.f.WaitDefaultServiceAccount(t, e.ns)
	for _, q := range []string{"besteffort", "notbesteffort", "terminating", "notterminating", "selector"} {
		e.waitSynced(e.ns, q, "pods", "written", false, func(context.Context, *corev1.ResourceQuota) (bool, error) { return true, nil })
	}
	e.pod(e.ns, "besteffort", nil, nil, nil)
	e.pod(e.ns, "burstable-deadline", rl("cpu", "100m"), nil, ptr.To[int64](3600))
	e.pod(e.ns, "burstable", rl("cpu", "200m"), nil, nil)
	e.waitUsed(e.ns, "besteffort", rl("pods", "1"))
	e.waitUsed(e.ns, "notbesteffort", rl("pods", "2", "requests.cpu", "300m"))
	e.waitUsed(e.ns, "terminating", rl("pods", "1"))
	e.waitUsed(e.ns, "notterminating", rl("pods", "2"))
	e.waitUsed(e.ns, "selector", rl("pods", "1"))
}

// TestQuotaAdmission: the API server's quota admission charges creates against the
// status the controller writes, and the controller releases what deletions free: at the
// limit a create is refused with the quota's message, and once a pod is deleted the
// create succeeds.
func TestQuotaAdmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.waitRootCA()
	e.quota(e.ns, "two", rl("count/configmaps", "2", "count/secrets", "100"))
	e.waitCountsLive(e.ns, "two", "count/secrets", false)
	cms, err := e.names(ctx, configMaps, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(cms); i < 2; i++ {
		e.configMap(e.ns, fmt.Sprintf("cm-%d", i), false)
	}
	// The controller's own count of the ConfigMaps just charged, so that no recount from
	// an informer without them lowers the status under the create below.
	e.waitCountsLive(e.ns, "two", "count/secrets", true)
	_, err = e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "over"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: two") {
		t.Fatalf("a create over the quota: %v, want Forbidden, exceeded quota: two", err)
	}
	cms, err = e.names(ctx, configMaps, e.ns)
	if err != nil || len(cms) == 0 {
		t.Fatalf("ConfigMaps %v, err %v", cms, err)
	}
	if err := e.cs.CoreV1().ConfigMaps(e.ns).Delete(ctx, cms[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, quotaTimeout, "a create once a ConfigMap was deleted", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "over"}}, metav1.CreateOptions{})
		return err == nil, err
	})
	e.waitCountsLive(e.ns, "two", "count/secrets", false)
}
