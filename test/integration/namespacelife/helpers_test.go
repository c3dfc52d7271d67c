package namespacelife

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/test/framework"
)

// holdFinalizer is a finalizer nobody removes but the test: a ConfigMap carrying it keeps
// its namespace Terminating.
const holdFinalizer = "kshard.io/namespacelife-hold"

// terminatingNamespace creates a namespace, lets the controllers populate it, holds it
// with a finalized ConfigMap and deletes it, and returns it once Terminating. The
// cleanup releases the hold.
func terminatingNamespace(t *testing.T) string {
	t.Helper()
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	ctx := context.Background()
	waitServiceAccount(t, ns, "")
	waitRootCA(t, ns, nil)
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hold", Finalizers: []string{holdFinalizer}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, err := f.Client.CoreV1().ConfigMaps(ns).Patch(context.Background(), "hold", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("releasing the hold on %s: %v", ns, err)
		}
	})
	if err := f.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "namespace "+ns+" Terminating", func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err == nil && n.Status.Phase == corev1.NamespaceTerminating, err
	})
	return ns
}

// waitServiceAccount waits for the default ServiceAccount of ns whose UID is not notUID,
// and returns it.
func waitServiceAccount(t *testing.T, ns string, notUID types.UID) *corev1.ServiceAccount {
	t.Helper()
	f := framework.Get(t)
	var sa *corev1.ServiceAccount
	framework.Eventually(t, 30*time.Second, "default ServiceAccount in "+ns, func(ctx context.Context) (bool, error) {
		got, err := f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		sa = got
		return got.UID != notUID, nil
	})
	return sa
}

// waitRootCA waits for kube-root-ca.crt in ns to satisfy ok (nil: to exist), and returns it.
func waitRootCA(t *testing.T, ns string, ok func(*corev1.ConfigMap) bool) *corev1.ConfigMap {
	t.Helper()
	f := framework.Get(t)
	var cm *corev1.ConfigMap
	framework.Eventually(t, 30*time.Second, "kube-root-ca.crt in "+ns, func(ctx context.Context) (bool, error) {
		got, err := f.Client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cm = got
		return ok == nil || ok(got), nil
	})
	return cm
}

// controllerErrors returns, summed over the package's shards, the reconcile errors of
// controller so far; ok is false when the cluster's kube-controller-manager runs it.
func controllerErrors(t *testing.T, controller string) (n float64, ok bool) {
	t.Helper()
	k := framework.RunningControllers(t).KShard
	if k == nil {
		return 0, false
	}
	for _, s := range k.Shards {
		if s.Exited() {
			continue
		}
		v, err := framework.Metric(context.Background(), s.HTTPURL, "kshard_controller_reconcile_errors_total", `controller="`+controller+`"`)
		if err != nil {
			t.Fatal(err)
		}
		n += v
	}
	return n, true
}
