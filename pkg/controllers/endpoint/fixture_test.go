package endpoint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is a controller on a fake clientset whose caches the test fills by hand.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, opts Options, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...)}
	ctrl, err := newController(f.ControllerContext(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(cached...)
	return f
}

// actions returns the fake client's writes as "verb resource name".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.Client, controllertest.ObjectNames)
}

// written returns the Endpoints the last create or update sent, failing if none was.
func (f *fixture) written() *corev1.Endpoints {
	f.T.Helper()
	var out *corev1.Endpoints
	for _, e := range controllertest.Created[*corev1.Endpoints](f.Client) {
		out = e
	}
	for _, a := range f.Client.Actions() {
		if u, ok := a.(interface{ GetObject() runtime.Object }); ok && a.GetVerb() == "update" {
			out = u.GetObject().(*corev1.Endpoints)
		}
	}
	if out == nil {
		f.T.Fatal("no Endpoints written")
	}
	return out
}

func objs(os ...runtime.Object) []runtime.Object { return os }

type svcOpt func(*corev1.Service)

// newService is the Service ns/web selecting app=web with cluster IP 10.0.0.1 and one
// TCP port 80 → 8080.
func newService(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-svc", Labels: map[string]string{"tier": "front"}},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.0.0.1",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func headless() svcOpt { return func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone } }

func noPorts() svcOpt { return func(s *corev1.Service) { s.Spec.Ports = nil } }

func publishNotReady() svcOpt {
	return func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }
}

func ports(ps ...corev1.ServicePort) svcOpt { return func(s *corev1.Service) { s.Spec.Ports = ps } }

type podOpt func(*corev1.Pod)

// newPod is a running, ready pod ns/name labelled app=web with IP ip on node n1, whose
// container serves port 8080 named "http".
func newPod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "web"}, ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady() podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
}

func terminating() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
}

func hostname(host, subdomain string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = host, subdomain }
}

func labelled(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

// addr is the address of pod name with IP ip on node n1.
func addr(name, ip string) corev1.EndpointAddress {
	n := "n1"
	return corev1.EndpointAddress{IP: ip, NodeName: &n,
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

func httpPort() corev1.EndpointPort {
	return corev1.EndpointPort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}
}

// storedEndpoints is an Endpoints ns/web as this controller writes it for subsets, at
// resourceVersion rv.
func storedEndpoints(rv string, subsets ...corev1.EndpointSubset) *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: rv,
			Labels: map[string]string{"tier": "front", LabelManagedBy: ControllerName}},
		Subsets: subsets,
	}
}
