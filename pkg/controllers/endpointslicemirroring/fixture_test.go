//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is the controller on a fake clientset whose caches the test fills by hand: the
// informers never run, so an object the controller wrote is in its cache only once the
// test puts it there.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	if opts.MaxEndpointsPerSubset == 0 {
		opts.MaxEndpointsPerSubset = defaultMaxPerSubst
	}
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...)}
	controllertest.GenerateNames(f.Client, "endpointslices")
	generations(f)
	ctrl, err := newController(f.ControllerContext(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// generations makes the fake API server do for EndpointSlices what the real one does and
// the tracker relies on: metadata.generation is 1 on create and grows by one on every
// update.
func generations(f *fixture) {
	f.Client.PrependReactor("create", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		o, err := meta.Accessor(a.(clienttesting.CreateAction).GetObject())
		if err != nil {
			return true, nil, err
		}
		o.SetGeneration(1)
		return false, nil, nil
	})
	f.Client.PrependReactor("update", "endpointslices", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ua := a.(clienttesting.UpdateAction)
		o, err := meta.Accessor(ua.GetObject())
		if err != nil {
			return true, nil, err
		}
		gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
		stored, err := f.Client.Tracker().Get(gvr, ua.GetNamespace(), o.GetName())
		if err != nil {
			return true, nil, err
		}
		so, _ := meta.Accessor(stored)
		o.SetGeneration(so.GetGeneration() + 1)
		o.SetUID(so.GetUID())
		return false, nil, nil
	})
}

// slices returns the slices the fake API server holds in ns.
func (f *fixture) slices() []*discoveryv1.EndpointSlice {
	return controllertest.Stored[*discoveryv1.EndpointSlice](f.T, f.Client, "ns")
}

// cacheStored puts every slice the fake API server holds into the cache, as the informer
// would once it caught up.
func (f *fixture) cacheStored() {
	for _, s := range f.slices() {
		f.Cache(s)
	}
}

// cacheExactlyStored makes the slice cache hold what the fake API server holds, deletions
// included.
func (f *fixture) cacheExactlyStored() {
	stored := map[string]bool{}
	for _, s := range f.slices() {
		stored[s.Name] = true
		f.Cache(s)
	}
	for _, o := range f.Indexer(&discoveryv1.EndpointSlice{}).List() {
		if s := o.(*discoveryv1.EndpointSlice); !stored[s.Name] {
			f.Uncache(s)
		}
	}
}

// writes returns the fake client's writes, objects named.
func (f *fixture) writes() []string {
	return controllertest.Actions(f.Client, controllertest.Writes|controllertest.ObjectNames)
}

// --- object builders ---

type epOpt func(*corev1.Endpoints)

func newEndpoints(name string, opts ...epOpt) *corev1.Endpoints {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-ep-" + name), ResourceVersion: "1"}}
	for _, o := range opts {
		o(ep)
	}
	return ep
}

func addr(ip string) corev1.EndpointAddress { return corev1.EndpointAddress{IP: ip} }

func podAddr(ip, pod, node string) corev1.EndpointAddress {
	return corev1.EndpointAddress{IP: ip, NodeName: ptr.To(node),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod, UID: types.UID("uid-" + pod)}}
}

func port(name string, p int32) corev1.EndpointPort {
	return corev1.EndpointPort{Name: name, Port: p, Protocol: corev1.ProtocolTCP}
}

func subset(ready, notReady []corev1.EndpointAddress, ports ...corev1.EndpointPort) epOpt {
	return func(ep *corev1.Endpoints) {
		ep.Subsets = append(ep.Subsets, corev1.EndpointSubset{Addresses: ready, NotReadyAddresses: notReady, Ports: ports})
	}
}

func epLabels(kv ...string) epOpt {
	return func(ep *corev1.Endpoints) {
		if ep.Labels == nil {
			ep.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			ep.Labels[kv[i]] = kv[i+1]
		}
	}
}

func epAnnotations(kv ...string) epOpt {
	return func(ep *corev1.Endpoints) {
		if ep.Annotations == nil {
			ep.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			ep.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func newService(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-svc-" + name)},
		Spec: corev1.ServiceSpec{Selector: selector}}
}

// mirrored returns the slice the controller would write for ep (as created: named name,
// generation 1), for tests that start from existing slices.
func mirrored(name string, ep *corev1.Endpoints, addrType discoveryv1.AddressType, ports []corev1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	sp := slicePorts(ports)
	newPortKey(sp, addrType) // the order the controller writes them in
	s := newSlice(ep, sp, addrType, name)
	s.UID, s.Generation, s.ResourceVersion = types.UID("uid-"+name), 1, "1"
	s.Endpoints = eps
	return s
}

func endpoint(ip string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
}

// describe summarises a slice: "addressType [ports] ip:ready ..." (endpoints sorted).
func describe(s *discoveryv1.EndpointSlice) string {
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0)))
	}
	var eps []string
	for _, e := range s.Endpoints {
		d := fmt.Sprintf("%s:%v", strings.Join(e.Addresses, ","), ptr.Deref(e.Conditions.Ready, false))
		if e.TargetRef != nil {
			d += "@" + e.TargetRef.Name
		}
		if e.NodeName != nil {
			d += "/" + *e.NodeName
		}
		if e.Hostname != nil {
			d += "#" + *e.Hostname
		}
		eps = append(eps, d)
	}
	sort.Strings(eps)
	return fmt.Sprintf("%s [%s] %s", s.AddressType, strings.Join(ports, " "), strings.Join(eps, " "))
}

// describeAll summarises slices, sorted.
func describeAll(ss []*discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, describe(s))
	}
	sort.Strings(out)
	return out
}

func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("shard", pflag.ContinueOnError) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
