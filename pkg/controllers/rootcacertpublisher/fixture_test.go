package rootcacertpublisher

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// bundle is the fixtures' CA bundle (its content is not parsed past the constructor).
const bundle = "-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n"

// fixture is a controller on a fake clientset whose caches the test fills by hand.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...)}
	ctrl, err := newController(f.ControllerContext(), []byte(bundle))
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

// written returns the ConfigMap of the last create or update.
func (f *fixture) written() *corev1.ConfigMap {
	var out *corev1.ConfigMap
	for _, a := range f.Client.Actions() {
		// Creates and updates both carry the object (core.CreateAction and
		// core.UpdateAction have the same method set).
		if w, ok := a.(core.CreateAction); ok && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			out = w.GetObject().(*corev1.ConfigMap)
		}
	}
	return out
}

type cmOpt func(*corev1.ConfigMap)

// rootCM is the ConfigMap as the controller publishes it, changed by opts.
func rootCM(ns string, opts ...cmOpt) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName, ResourceVersion: "1",
			Annotations: map[string]string{DescriptionAnnotation: Description}},
		Data: map[string]string{DataKey: bundle},
	}
	for _, o := range opts {
		o(cm)
	}
	return cm
}

func namespace(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}
