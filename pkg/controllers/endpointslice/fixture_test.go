package endpointslice

import (
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is the controller on a fake clientset whose informer caches the test fills by
// hand: the informers never run, so "informer lag" is an object not yet cached.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	if opts.MaxEndpointsPerSlice == 0 {
		opts.MaxEndpointsPerSlice = defaultMaxEndpointsPerSlice
	}
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...)}
	controllertest.GenerateNames(f.Client, "endpointslices")
	ctrl, err := newController(f.ControllerContext(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// slices returns the slices stored in namespace "ns", sorted by name.
func (f *fixture) slices() []*discoveryv1.EndpointSlice {
	out := controllertest.Stored[*discoveryv1.EndpointSlice](f.T, f.Client, "ns")
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// cacheStored caches what the fake API server stores of the slices, as the informer
// would once it saw the controller's writes.
func (f *fixture) cacheStored() {
	for _, s := range f.slices() {
		f.Cache(s)
	}
}

// actions returns the fake client's writes as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Writes) }

// --- object builders ---

var appLabels = map[string]string{"app": "web"}

type svcOpt func(*corev1.Service)

func newService(name string, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			Selector:   appLabels,
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			ClusterIP:  "10.0.0.1",
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withSelector(sel map[string]string) svcOpt {
	return func(s *corev1.Service) { s.Spec.Selector = sel }
}

func externalName(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeExternalName
	s.Spec.ExternalName = "example.com"
}

func publishNotReady(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }

func namedTargetPort(port string) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString(port) }
}

type podOpt func(*corev1.Pod)

func newPod(i int, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-pod-%d", i)),
			Labels: appLabels, ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      fmt.Sprintf("10.1.%d.%d", i/250, i%250+1),
			PodIPs:     []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = &metav1.Time{}
	notReady(p)
}

func withLabels(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

func newPods(n int, opts ...podOpt) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = newPod(i, opts...)
	}
	return out
}

func newNode(name, zone string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

// managedSlice is a slice of the Service as this controller labels them.
func managedSlice(name, svc string, generation int64, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: generation, ResourceVersion: "1",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: ControllerName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc, UID: types.UID("uid-" + svc),
				Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints,
	}
}

func ptrTo[T any](v T) *T { return &v }

// objs puts services, pods, nodes and slices into one list for the fixture.
func objs(parts ...any) []runtime.Object {
	var out []runtime.Object
	for _, p := range parts {
		switch v := p.(type) {
		case runtime.Object:
			out = append(out, v)
		case []*corev1.Pod:
			for _, o := range v {
				out = append(out, o)
			}
		default:
			panic(fmt.Sprintf("objs: %T", p))
		}
	}
	return out
}

// endpointSummary describes each endpoint of slices as "ip ready/serving/terminating".
func endpointSummary(slices []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			b := func(p *bool) string {
				if p == nil {
					return "-"
				}
				return fmt.Sprint(*p)
			}
			out = append(out, fmt.Sprintf("%s %s/%s/%s", e.Addresses[0], b(e.Conditions.Ready), b(e.Conditions.Serving), b(e.Conditions.Terminating)))
		}
	}
	sort.Strings(out)
	return out
}
