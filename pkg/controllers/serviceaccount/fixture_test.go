package serviceaccount

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is a controller on a fake clientset whose caches the test fills by hand.
type fixture struct {
	t      *testing.T
	client *fake.Clientset
	ctrl   *Controller
	queue  *controllertest.Queue
	inf    controllertest.Informers
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(api...)}
	factory := informers.NewSharedInformerFactory(f.client, 0)
	f.inf = controllertest.Informers{SharedInformerFactory: factory}
	f.queue = controllertest.NewQueue()
	t.Cleanup(f.queue.ShutDown)
	log, _ := ktesting.NewTestContext(t)
	c := controllertest.Context(Descriptor(), factory, f.queue)
	c.Client, c.Logger = f.client, log
	ctrl, err := newController(c)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	f.inf.Add(t, cached...)
	return f
}

func (f *fixture) sync(key string) error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.ctrl.sync(ctx, key)
}

// actions returns the fake client's actions as "verb resource namespace/name".
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.client.Actions() {
		s := a.GetVerb() + " " + a.GetResource().Resource
		if c, ok := a.(core.CreateAction); ok {
			m, _ := c.GetObject().(metav1.Object)
			s += " " + a.GetNamespace() + "/" + m.GetName()
		}
		out = append(out, s)
	}
	return out
}

func namespace(name string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
}

func active(name string) *corev1.Namespace { return namespace(name, corev1.NamespaceActive) }

func serviceAccount(ns, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
