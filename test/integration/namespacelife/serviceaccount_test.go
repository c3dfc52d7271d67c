package namespacelife

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/test/framework"
)

// A new namespace gets the default ServiceAccount, upstream's (a name and nothing else),
// and gets it again after it is deleted.
func TestDefaultServiceAccount(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	sa := waitServiceAccount(t, ns, "")
	if len(sa.Labels) > 0 || len(sa.Annotations) > 0 || len(sa.Secrets) > 0 || len(sa.ImagePullSecrets) > 0 ||
		sa.AutomountServiceAccountToken != nil || len(sa.OwnerReferences) > 0 {
		t.Errorf("default ServiceAccount %+v: want a name and nothing else, as upstream creates it", sa)
	}
	if err := f.Client.CoreV1().ServiceAccounts(ns).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitServiceAccount(t, ns, sa.UID)
	t.Logf("%s: default ServiceAccount %s re-created as %s", ns, sa.UID, again.UID)
}

// A Terminating namespace gets nothing new: its default ServiceAccount and
// kube-root-ca.crt, deleted, stay deleted, and neither controller turns the API server's
// refusal into retried errors. An active namespace in the same window gets its
// ServiceAccount back, so the controllers were working while the check ran.
func TestTerminatingNamespaceGetsNothing(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	ctx := context.Background()
	ns := terminatingNamespace(t)
	control := f.Namespace(t, nil).Name
	controlSA := waitServiceAccount(t, control, "")
	saErrors, kshard := controllerErrors(t, saController)
	caErrors, _ := controllerErrors(t, rootCAController)

	// The namespace controller may have deleted them already; delete what is left.
	for _, del := range []func() error{
		func() error {
			return f.Client.CoreV1().ServiceAccounts(ns).Delete(ctx, "default", metav1.DeleteOptions{})
		},
		func() error { return f.Client.CoreV1().ConfigMaps(ns).Delete(ctx, rootCAName, metav1.DeleteOptions{}) },
		func() error {
			return f.Client.CoreV1().ServiceAccounts(control).Delete(ctx, "default", metav1.DeleteOptions{})
		},
	} {
		if err := del(); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	waitServiceAccount(t, control, controlSA.UID)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); !isNotFound(err) {
			t.Fatalf("terminating namespace %s: default ServiceAccount: %v, want it not found", ns, err)
		}
		if _, err := f.Client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAName, metav1.GetOptions{}); !isNotFound(err) {
			t.Fatalf("terminating namespace %s: %s: %v, want it not found", ns, rootCAName, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !kshard {
		return
	}
	if now, _ := controllerErrors(t, saController); now != saErrors {
		t.Errorf("serviceaccount reconcile errors went from %v to %v during the check", saErrors, now)
	}
	if now, _ := controllerErrors(t, rootCAController); now != caErrors {
		t.Errorf("root-ca-cert-publisher reconcile errors went from %v to %v during the check", caErrors, now)
	}
}
