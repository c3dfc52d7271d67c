package serviceaccount

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is a controller on a fake clientset whose caches the test fills by hand.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...)}
	ctrl, err := newController(f.ControllerContext())
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(cached...)
	return f
}

// actions returns the fake client's requests as "verb resource namespace/name".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.Client, controllertest.Reads|controllertest.ObjectNames|controllertest.Namespaced)
}

func namespace(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}

func active(name string) *corev1.Namespace { return namespace(name, corev1.NamespaceActive) }

func serviceAccount(ns, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
