//lint:file-ignore SA1019 the mirroring controller mirrors core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpoints

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// mirrorManagedBy is the managed-by label value of the mirroring controller's slices.
const mirrorManagedBy = "endpointslicemirroring-controller.k8s.io"

// mirrorTimeout bounds every wait for the mirroring controller.
const mirrorTimeout = 60 * time.Second

// mirrorEnv is one mirroring test's client and namespace.
type mirrorEnv struct {
	t  *testing.T
	cs kubernetes.Interface
	ns string
}

// newMirrorEnv gives the test its own namespace; a failed test logs its Endpoints, slices
// and events first.
func newMirrorEnv(t *testing.T) *mirrorEnv {
	t.Helper()
	f := framework.Get(t)
	e := &mirrorEnv{t: t, cs: f.Client}
	e.ns = f.Namespace(t, nil).Name
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

func (e *mirrorEnv) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if l, err := e.cs.CoreV1().Endpoints(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ep := range l.Items {
			fmt.Fprintf(&b, "endpoints %s uid=%s labels=%v subsets=%+v\n", ep.Name, ep.UID, ep.Labels, ep.Subsets)
		}
	}
	if l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			fmt.Fprintf(&b, "slice %s gen=%d labels=%v owners=%v: %s\n", s.Name, s.Generation, s.Labels, s.OwnerReferences, describeMirrored(s))
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range l.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason,
				ev.Count, ev.Source.Component, ev.Message)
		}
	}
	e.t.Log(b.String())
}

// service creates a Service with port http/80, without a selector when selector is nil.
func (e *mirrorEnv) service(name string, selector map[string]string) *corev1.Service {
	e.t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	out, err := e.cs.CoreV1().Services(e.ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// endpoints creates an Endpoints, as a user or another controller writes one for a
// Service without a selector.
func (e *mirrorEnv) endpoints(ep *corev1.Endpoints) *corev1.Endpoints {
	e.t.Helper()
	out, err := e.cs.CoreV1().Endpoints(e.ns).Create(context.Background(), ep, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// updateEndpoints changes the Endpoints name with change, retrying conflicts.
func (e *mirrorEnv) updateEndpoints(name string, change func(*corev1.Endpoints)) *corev1.Endpoints {
	e.t.Helper()
	var out *corev1.Endpoints
	framework.Eventually(e.t, mirrorTimeout, "Endpoints "+name+" updated", func(ctx context.Context) (bool, error) {
		ep, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(ep)
		out, err = e.cs.CoreV1().Endpoints(e.ns).Update(ctx, ep, metav1.UpdateOptions{})
		return err == nil, err
	})
	return out
}

// mirrored returns the mirroring controller's slices of name.
func (e *mirrorEnv) mirrored(ctx context.Context, name string) ([]discoveryv1.EndpointSlice, error) {
	l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name + "," + discoveryv1.LabelManagedBy + "=" + mirrorManagedBy})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitMirrored waits until the mirrored slices of name are exactly want (describeMirrored
// of each, in any order) and returns them.
func (e *mirrorEnv) waitMirrored(name, what string, want ...string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	if want == nil {
		want = []string{}
	}
	sort.Strings(want)
	var out []discoveryv1.EndpointSlice
	framework.Eventually(e.t, mirrorTimeout, "slices of "+name+": "+what, func(ctx context.Context) (bool, error) {
		ss, err := e.mirrored(ctx, name)
		if err != nil {
			return false, err
		}
		got := []string{}
		for _, s := range ss {
			got = append(got, describeMirrored(s))
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			return false, fmt.Errorf("slices %q, want %q", got, want)
		}
		out = ss
		return true, nil
	})
	return out
}

// describeMirrored summarises a slice as "addressType [name/port/protocol ...] ip:ready[@target][/node][#hostname] ...",
// ports and endpoints sorted (the order of the ports is upstream's hash order, which the
// unit tests check).
func describeMirrored(s discoveryv1.EndpointSlice) string {
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
	}
	sort.Strings(ports)
	var eps []string
	for _, ep := range s.Endpoints {
		d := fmt.Sprintf("%s:%v", strings.Join(ep.Addresses, ","), ptr.Deref(ep.Conditions.Ready, false))
		if ep.TargetRef != nil {
			d += "@" + ep.TargetRef.Name
		}
		if ep.NodeName != nil {
			d += "/" + *ep.NodeName
		}
		if ep.Hostname != nil {
			d += "#" + *ep.Hostname
		}
		eps = append(eps, d)
	}
	sort.Strings(eps)
	return fmt.Sprintf("%s [%s] %s", s.AddressType, strings.Join(ports, " "), strings.Join(eps, " "))
}

func mirrorAddr(ip string) corev1.EndpointAddress { return corev1.EndpointAddress{IP: ip} }

// simpleEndpoints is an Endpoints of one subset with port http/80.
func simpleEndpoints(name string, ready []string, notReady []string) *corev1.Endpoints {
	var r, n []corev1.EndpointAddress
	for _, ip := range ready {
		r = append(r, mirrorAddr(ip))
	}
	for _, ip := range notReady {
		n = append(n, mirrorAddr(ip))
	}
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subsets: []corev1.EndpointSubset{{Addresses: r, NotReadyAddresses: n,
			Ports: []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}}
}

// TestMirrorHandWrittenEndpoints: a selectorless Service's hand-written Endpoints is
// mirrored into one slice per address type (addresses, ports, ready and not-ready,
// targets, nodes and hostnames, its labels and annotations, owned by the Endpoints); its
// updates are followed, a hand edit of a mirrored slice is reverted, and the slices go
// with the Endpoints.
func TestMirrorHandWrittenEndpoints(t *testing.T) {
	t.Parallel()
	e := newMirrorEnv(t)
	e.service("web", nil)
	ep := e.endpoints(&corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"team": "a"},
			Annotations: map[string]string{"note": "kept", corev1.EndpointsLastChangeTriggerTime: "2026-11-30T00:00:00Z"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{
				{IP: "10.1.0.1", Hostname: "one", NodeName: ptr.To("node-a")},
				{IP: "10.1.0.2", TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: e.ns, Name: "two", UID: "uid-two"}},
				{IP: "fd00::1"},
			},
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.1.0.3"}},
			Ports: []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
		}},
	})
	ss := e.waitMirrored("web", "mirrored",
		"IPv4 [dns/53/UDP http/80/TCP] 10.1.0.1:true/node-a#one 10.1.0.2:true@two 10.1.0.3:false",
		"IPv6 [dns/53/UDP http/80/TCP] fd00::1:true")
	for _, s := range ss {
		wantLabels := map[string]string{"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: mirrorManagedBy}
		if !reflect.DeepEqual(s.Labels, wantLabels) {
			t.Errorf("slice %s: labels %v, want %v", s.Name, s.Labels, wantLabels)
		}
		if want := map[string]string{"note": "kept"}; !reflect.DeepEqual(s.Annotations, want) {
			t.Errorf("slice %s: annotations %v, want %v (the trigger time not copied)", s.Name, s.Annotations, want)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != ep.UID || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
			t.Errorf("slice %s: owners %+v, want the Endpoints %s as controller", s.Name, s.OwnerReferences, ep.UID)
		}
		if !strings.HasPrefix(s.Name, "web-") {
			t.Errorf("slice %s: want a name generated from web-", s.Name)
		}
	}

	// Updates are followed: an address goes, one becomes ready, one is added not ready,
	// the IPv6 one goes (and its slice with it), a port goes.
	e.updateEndpoints("web", func(ep *corev1.Endpoints) {
		ep.Subsets = []corev1.EndpointSubset{{
			Addresses:         []corev1.EndpointAddress{{IP: "10.1.0.2"}, {IP: "10.1.0.3"}},
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.1.0.4"}},
			Ports:             []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		}}
	})
	ss = e.waitMirrored("web", "updated", "IPv4 [http/80/TCP] 10.1.0.2:true 10.1.0.3:true 10.1.0.4:false")
	kept := ss[0]

	// A hand edit of the mirrored slice is reverted, in place.
	edited := kept.DeepCopy()
	edited.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	edited.Labels["team"] = "b"
	edited, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Update(context.Background(), edited, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("web", "the hand edit reverted", "IPv4 [http/80/TCP] 10.1.0.2:true 10.1.0.3:true 10.1.0.4:false")
	framework.Eventually(t, mirrorTimeout, "the label edit reverted", func(ctx context.Context) (bool, error) {
		s, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, kept.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if s.UID != kept.UID || s.Generation <= edited.Generation || s.Labels["team"] != "a" {
			return false, fmt.Errorf("slice %s uid %s generation %d labels %v; want uid %s, a generation above the edit's %d, team=a",
				s.Name, s.UID, s.Generation, s.Labels, kept.UID, edited.Generation)
		}
		return true, nil
	})

	// The slices go with the Endpoints.
	if err := e.cs.CoreV1().Endpoints(e.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("web", "gone with the Endpoints")
}

// TestMirrorTooManyAddresses: of a subset of 1001 addresses the first 1000 in upstream's
// order (by IP, as strings) are mirrored and the last is skipped, with upstream's warning
// on the Endpoints from upstream's event source.
func TestMirrorTooManyAddresses(t *testing.T) {
	t.Parallel()
	e := newMirrorEnv(t)
	e.service("big", nil)
	var ips []string
	for i := range 1001 {
		ips = append(ips, fmt.Sprintf("10.7.%d.%d", i/250, i%250+1))
	}
	e.endpoints(simpleEndpoints("big", ips, nil))
	sorted := slices.Clone(ips)
	sort.Strings(sorted) // the order RepackSubsets puts them in: the last one is skipped
	want := map[string]bool{}
	for _, ip := range sorted[:1000] {
		want[ip] = true
	}
	framework.Eventually(t, mirrorTimeout, "one slice of the first 1000 addresses", func(ctx context.Context) (bool, error) {
		ss, err := e.mirrored(ctx, "big")
		if err != nil {
			return false, err
		}
		if len(ss) != 1 {
			return false, fmt.Errorf("%d slices, want 1", len(ss))
		}
		got, wrong := 0, []string{}
		for _, ep := range ss[0].Endpoints {
			if ip := ep.Addresses[0]; want[ip] && ptr.Deref(ep.Conditions.Ready, false) {
				got++
			} else {
				wrong = append(wrong, ip)
			}
		}
		if got != 1000 || len(wrong) > 0 {
			return false, fmt.Errorf("%d of the first 1000 addresses ready in the slice, and %v", got, wrong)
		}
		return true, nil
	})
	framework.Eventually(t, mirrorTimeout, "the TooManyAddressesToMirror warning", func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Endpoints,involvedObject.name=big"})
		if err != nil {
			return false, err
		}
		var got []string
		for _, ev := range l.Items {
			got = append(got, fmt.Sprintf("%s %s %s: %s", ev.Source.Component, ev.Type, ev.Reason, ev.Message))
		}
		want := []string{"endpoint-slice-mirroring-controller Warning TooManyAddressesToMirror: " +
			"A max of 1000 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped"}
		if !reflect.DeepEqual(got, want) {
			return false, fmt.Errorf("events %q, want %q", got, want)
		}
		return true, nil
	})
}

// TestMirrorSkipMirror: an Endpoints labelled endpointslice.kubernetes.io/skip-mirror=true
// is not mirrored (checked once an Endpoints created after it is); the label removed, it
// is; the label back, its slices go.
func TestMirrorSkipMirror(t *testing.T) {
	t.Parallel()
	e := newMirrorEnv(t)
	e.service("skipped", nil)
	e.service("sentinel", nil)
	skipped := simpleEndpoints("skipped", []string{"10.2.0.1"}, nil)
	skipped.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"}
	e.endpoints(skipped)
	e.endpoints(simpleEndpoints("sentinel", []string{"10.2.0.2"}, nil))
	e.waitMirrored("sentinel", "mirrored", "IPv4 [http/80/TCP] 10.2.0.2:true")
	if ss, err := e.mirrored(context.Background(), "skipped"); err != nil || len(ss) != 0 {
		t.Fatalf("skip-mirror Endpoints: slices %v, %v; want none", ss, err)
	}
	e.updateEndpoints("skipped", func(ep *corev1.Endpoints) { delete(ep.Labels, discoveryv1.LabelSkipMirror) })
	e.waitMirrored("skipped", "mirrored once the label is gone", "IPv4 [http/80/TCP] 10.2.0.1:true")
	e.updateEndpoints("skipped", func(ep *corev1.Endpoints) { ep.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"} })
	e.waitMirrored("skipped", "gone with the label back")
}

// TestMirrorServiceChanges: a Service that gains a selector loses its mirrored slices
// (the EndpointSlice controller serves it from then on), and so does an Endpoints whose
// Service is deleted.
func TestMirrorServiceChanges(t *testing.T) {
	t.Parallel()
	e := newMirrorEnv(t)
	e.service("legacy", nil)
	e.service("doomed", nil)
	e.endpoints(simpleEndpoints("legacy", []string{"10.3.0.1"}, []string{"10.3.0.2"}))
	e.endpoints(simpleEndpoints("doomed", []string{"10.3.0.3"}, nil))
	e.waitMirrored("legacy", "mirrored", "IPv4 [http/80/TCP] 10.3.0.1:true 10.3.0.2:false")
	e.waitMirrored("doomed", "mirrored", "IPv4 [http/80/TCP] 10.3.0.3:true")

	framework.Eventually(t, mirrorTimeout, "Service legacy given a selector", func(ctx context.Context) (bool, error) {
		svc, err := e.cs.CoreV1().Services(e.ns).Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		svc.Spec.Selector = map[string]string{"app": "legacy"}
		_, err = e.cs.CoreV1().Services(e.ns).Update(ctx, svc, metav1.UpdateOptions{})
		return err == nil, err
	})
	e.waitMirrored("legacy", "gone once the Service has a selector")

	if err := e.cs.CoreV1().Services(e.ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("doomed", "gone with the Service")
}

// TestMirroringAcrossHandoff: a namespace's mirrored slices stay right when the namespace
// moves to another shard (a spare having joined), its owner stopped by SIGTERM (a
// graceful hand-over) or SIGKILL: Endpoints changed, a mirrored slice edited by hand and
// an Endpoints deleted around the move are all caught up with by the new owner, which
// writes no second slice for an Endpoints the old owner mirrored; and a slice of the
// mirroring controller whose Endpoints does not exist, written while the namespace moves,
// is deleted (after a SIGKILL nobody works the namespace then, so no event of the slice
// reaches a queue: the new owner finds it when it acquires the namespace). Not parallel:
// it stops one of the package's shards.
func TestMirroringAcrossHandoff(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the mirroring controller: no shards to move a namespace between")
	}
	for _, tt := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGKILL", syscall.SIGKILL}, {"SIGTERM", syscall.SIGTERM}} {
		t.Run(tt.name, func(t *testing.T) { mirroringAcrossHandoff(t, c, tt.name, tt.sig) })
	}
}

func mirroringAcrossHandoff(t *testing.T, c *framework.Controllers, sigName string, sig syscall.Signal) {
	k := c.KShard
	k.JoinSpare(t)
	e := newMirrorEnv(t)
	const n = 4
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		e.service(name, nil)
		e.endpoints(simpleEndpoints(name, []string{fmt.Sprintf("10.4.%d.1", i)}, []string{fmt.Sprintf("10.4.%d.2", i)}))
	}
	e.service("doomed", nil)
	e.endpoints(simpleEndpoints("doomed", []string{"10.4.9.1"}, nil))
	before := map[string]types.UID{}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ss := e.waitMirrored(name, "mirrored by the first owner",
			fmt.Sprintf("IPv4 [http/80/TCP] 10.4.%d.1:true 10.4.%d.2:false", i, i))
		before[name] = ss[0].UID
	}
	e.waitMirrored("doomed", "mirrored by the first owner", "IPv4 [http/80/TCP] 10.4.9.1:true")

	owner := k.StableOwner(t, e.ns)
	if sig == syscall.SIGKILL {
		owner.Kill()
	} else if err := owner.Signal(sig); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx := context.Background()
	// While the namespace moves (after a SIGKILL nobody works it): Endpoints changed, one
	// deleted, a slice edited by hand, an orphan slice of the mirroring controller written.
	e.updateEndpoints("svc-0", func(ep *corev1.Endpoints) {
		ep.Subsets[0].Addresses = append(ep.Subsets[0].Addresses, mirrorAddr("10.4.0.3"))
	})
	e.updateEndpoints("svc-1", func(ep *corev1.Endpoints) {
		ep.Subsets[0].Addresses, ep.Subsets[0].NotReadyAddresses = ep.Subsets[0].NotReadyAddresses, ep.Subsets[0].Addresses
	})
	if err := e.cs.CoreV1().Endpoints(e.ns).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ss, err := e.mirrored(ctx, "svc-2")
	if err != nil || len(ss) != 1 {
		t.Fatalf("slices of svc-2: %v, %v", ss, err)
	}
	edited := ss[0].DeepCopy()
	edited.Endpoints = edited.Endpoints[:1]
	if _, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ghost-", Labels: map[string]string{
			discoveryv1.LabelServiceName: "ghost", discoveryv1.LabelManagedBy: mirrorManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.4.8.1"}}},
	}
	orphan, err = e.cs.DiscoveryV1().EndpointSlices(e.ns).Create(ctx, orphan, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writesDone := time.Now()
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	t.Logf("namespace %s moved %s → %s, seen %s after the %s; the test's writes took %s",
		e.ns, owner.Name, to.Name, seen.Sub(killed).Round(time.Millisecond), sigName, writesDone.Sub(killed).Round(time.Millisecond))
	if sig == syscall.SIGTERM {
		if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
			t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
		}
	}

	e.waitMirrored("svc-0", "the added address", "IPv4 [http/80/TCP] 10.4.0.1:true 10.4.0.2:false 10.4.0.3:true")
	e.waitMirrored("svc-1", "readiness swapped", "IPv4 [http/80/TCP] 10.4.1.1:false 10.4.1.2:true")
	e.waitMirrored("svc-2", "the hand edit reverted", "IPv4 [http/80/TCP] 10.4.2.1:true 10.4.2.2:false")
	e.waitMirrored("svc-3", "unchanged", "IPv4 [http/80/TCP] 10.4.3.1:true 10.4.3.2:false")
	e.waitMirrored("doomed", "gone with its Endpoints")
	framework.Eventually(t, mirrorTimeout, "the orphan slice "+orphan.Name+" deleted", func(ctx context.Context) (bool, error) {
		_, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Get(ctx, orphan.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("still there: %v", err)
	})
	// The new owner kept the old owner's slices rather than writing new ones.
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ss, err := e.mirrored(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) != 1 || ss[0].UID != before[name] {
			var uids []types.UID
			for _, s := range ss {
				uids = append(uids, s.UID)
			}
			t.Errorf("%s: slices %v after the move, want only %s, the first owner's", name, uids, before[name])
		}
	}

	// And it keeps working the namespace: a later edit is reverted too.
	ss, err = e.mirrored(ctx, "svc-3")
	if err != nil || len(ss) != 1 {
		t.Fatalf("slices of svc-3: %v, %v", ss, err)
	}
	edited = ss[0].DeepCopy()
	edited.Endpoints = nil
	if _, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMirrored("svc-3", "a later hand edit reverted", "IPv4 [http/80/TCP] 10.4.3.1:true 10.4.3.2:false")
}

// TestMirrorMetrics: the shards export upstream's endpoint_slice_mirroring_controller_*
// series and the queue's series under upstream's queue name, with their shard label.
// Parallel tests run after the handoff test, so no shard (and none of its counts) goes
// while it reads them.
func TestMirrorMetrics(t *testing.T) {
	t.Parallel()
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the mirroring controller: no shard metrics to read")
	}
	k := c.KShard
	sum := func(ctx context.Context, name string, match ...string) (float64, error) {
		total := 0.0
		for shard := range k.Live() {
			v, err := framework.Metric(ctx, k.Shards[shard].HTTPURL, name, append([]string{"shard=" + shard}, match...)...)
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	}
	ctx := context.Background()
	creates, err := sum(ctx, "endpoint_slice_mirroring_controller_changes", "operation=create")
	if err != nil {
		t.Fatal(err)
	}
	e := newMirrorEnv(t)
	e.service("counted", nil)
	e.endpoints(simpleEndpoints("counted", []string{"10.6.0.1", "10.6.0.2"}, nil))
	e.waitMirrored("counted", "mirrored", "IPv4 [http/80/TCP] 10.6.0.1:true 10.6.0.2:true")
	framework.Eventually(t, mirrorTimeout, "the shards' mirroring series", func(ctx context.Context) (bool, error) {
		for _, m := range []struct {
			name  string
			match []string
			min   float64
		}{
			{"endpoint_slice_mirroring_controller_changes", []string{"operation=create"}, creates + 1},
			{"endpoint_slice_mirroring_controller_endpoints_sync_duration_count", nil, 1},
			{"endpoint_slice_mirroring_controller_endpoints_added_per_sync_count", nil, 1},
			{"endpoint_slice_mirroring_controller_endpoints_desired", nil, 2},
			{"endpoint_slice_mirroring_controller_num_endpoint_slices", nil, 1},
			{"kshard_workqueue_adds_total", []string{"name=endpoint_slice_mirroring"}, 1},
		} {
			v, err := sum(ctx, m.name, m.match...)
			if err != nil {
				return false, err
			}
			if v < m.min {
				return false, fmt.Errorf("%s%v summed over the shards: %v, want at least %v", m.name, m.match, v, m.min)
			}
		}
		return true, nil
	})
}
