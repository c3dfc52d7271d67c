//lint:file-ignore SA1019 the scenario compares core/v1 Endpoints, deprecated in favour of EndpointSlices but still written by kube-controller-manager.
package differential

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kptr "k8s.io/utils/ptr"
)

// The Service endpoints scenario: the EndpointSlice, Endpoints and EndpointSlice mirroring
// controllers together, as every cluster runs them. In one namespace, step 1 creates pods
// web-0..2 and web-held (held by the test's finalizer) labelled app=web with named ports
// http and metrics, a pod db-0 (hostname db-0, subdomain hl), the Services web (ports
// by name and by number), hl (headless, publishNotReadyAddresses), empty (selecting no
// pod: the placeholder slice) and manual (no selector) with an Endpoints of the test's
// own (two ready addresses, one not ready). Step 2 deletes web-held (terminating while
// held) and relabels web-2 out of app=web. Step 3 adds an address to the manual Endpoints
// and changes empty's selector to app=other (web-2). Step 4 labels the manual Endpoints
// endpointslice.kubernetes.io/skip-mirror and deletes the Service web.
//
// Compared, per Service and address type, the content of its slices, not their names:
// how many, each endpoint (by its pod, or by address for the mirrored ones) with its
// conditions, hostname and zone, whether it names a node, the port sets, the slices'
// labels, annotations and owners; each Endpoints' addresses (ready and not ready, by pod
// or address), ports, labels and annotations; and the three controllers' events. The
// endpoints.kubernetes.io/last-change-trigger-time annotation is not compared: upstream
// consumes a sync's trigger time before it checks its cache, so whether the last write of
// a step carries the annotation depends on whether that write followed a retry after a
// stale cache (seen once: upstream's Endpoints had it after step 1, kshard's not).

const endpointsNS = "ep"

func TestDifferentialEndpoints(t *testing.T) {
	scenario{
		controllers: []string{"endpointslice", "endpoint", "endpointslicemirroring"},
		namespaces:  []string{endpointsNS},
		steps:       endpointsSteps,
		snapshot:    endpointsSnapshot,
		cleanup:     endpointsCleanup,
	}.run(t)
}

// epPod is a pod of the scenario, on the cluster's kwok nodes.
func epPod(name, app string, held bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: kptr.To[int64](30),
		Containers: []corev1.Container{{Name: "app", Image: imageV1, Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}}},
	}}
	if held {
		p.Finalizers = []string{holdFinalizer}
	}
	return p
}

func epService(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Selector: selector,
		Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
			{Name: "metrics", Port: 81, TargetPort: intstr.FromInt32(9090)},
		},
	}}
}

func manualEndpoints(ips ...string) *corev1.Endpoints {
	addrs := make([]corev1.EndpointAddress, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, corev1.EndpointAddress{IP: ip})
	}
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "manual", Labels: map[string]string{"team": "e2e"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses:         addrs,
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.250.0.3"}},
			Ports:             []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		}}}
}

var endpointsSteps = []step{
	{name: "Services by selector, headless and selectorless, and their pods", do: func(ctx context.Context, s *side) error {
		cs, ns := s.f.Client.CoreV1(), s.ns[endpointsNS]
		db := epPod("db-0", "web", false)
		db.Spec.Hostname, db.Spec.Subdomain = "db-0", "hl"
		for _, p := range []*corev1.Pod{epPod("web-0", "web", false), epPod("web-1", "web", false), epPod("web-2", "web", false),
			epPod("web-held", "web", true), db} {
			if _, err := cs.Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		hl := epService("hl", map[string]string{"app": "web"})
		hl.Spec.ClusterIP, hl.Spec.PublishNotReadyAddresses = corev1.ClusterIPNone, true
		for _, svc := range []*corev1.Service{epService("web", map[string]string{"app": "web"}), hl,
			epService("empty", map[string]string{"app": "none"}), epService("manual", nil)} {
			if _, err := cs.Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		_, err := cs.Endpoints(ns).Create(ctx, manualEndpoints("10.250.0.1", "10.250.0.2"), metav1.CreateOptions{})
		return err
	}, awaits: []string{"Service web IPv4 endpoint Pod/web-2", "Service manual IPv4 endpoint 10.250.0.1"}},
	{name: "a pod terminating, another relabelled", do: func(ctx context.Context, s *side) error {
		ns := s.ns[endpointsNS]
		if err := s.kubectl(ctx, endpointsNS, "delete", "pod/web-held", "--wait=false"); err != nil {
			return err
		}
		return mergePatch(ctx, s.f.Client.CoreV1().Pods(ns), "web-2", `{"metadata":{"labels":{"app":"other"}}}`)
	}},
	{name: "the selectorless Service's Endpoints and a selector changed", do: func(ctx context.Context, s *side) error {
		cs, ns := s.f.Client.CoreV1(), s.ns[endpointsNS]
		ep, err := cs.Endpoints(ns).Get(ctx, "manual", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ep.Subsets = manualEndpoints("10.250.0.1", "10.250.0.2", "10.250.0.4").Subsets
		if _, err := cs.Endpoints(ns).Update(ctx, ep, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return mergePatch(ctx, cs.Services(ns), "empty", `{"spec":{"selector":{"app":"other"}}}`)
	}, awaits: []string{"Service manual IPv4 endpoint 10.250.0.4", "Service empty IPv4 endpoint Pod/web-2"}},
	{name: "skip-mirror on the Endpoints, a Service deleted", do: func(ctx context.Context, s *side) error {
		ns := s.ns[endpointsNS]
		if err := mergePatch(ctx, s.f.Client.CoreV1().Endpoints(ns), "manual",
			`{"metadata":{"labels":{"endpointslice.kubernetes.io/skip-mirror":"true"}}}`); err != nil {
			return err
		}
		return s.f.Client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{})
	}},
}

// endpointsCleanup takes the test's finalizer off the held pod.
func endpointsCleanup(ctx context.Context, s *side) error {
	ns := s.ns[endpointsNS]
	err := mergePatch(ctx, s.f.Client.CoreV1().Pods(ns), "web-held", `{"metadata":{"finalizers":null}}`)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// endpointsControllers are the event sources compared.
var endpointsControllers = []string{"endpoint-slice-controller", "endpoint-controller", "endpoint-slice-mirroring-controller"}

// endpointsSnapshot reads the namespace's Services, EndpointSlices, Endpoints, pods and
// events. A step is done when every pod not being deleted runs with an address; every
// Service with a selector has a slice and an Endpoints, its slices hold exactly the
// running pods it selects, and a pod being deleted shows as terminating; every mirrored
// Endpoints has a slice, and none when it says skip-mirror; and no slice or Endpoints of
// a deleted Service remains.
func endpointsSnapshot(ctx context.Context, s *side) (view, error) {
	cs, ns := s.f.Client, s.ns[endpointsNS]
	out := flat{}
	var pending notReady
	n := newNormaliser(s, nil, nil)
	pods, events, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	podByIP := map[string]string{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && (p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "") {
			pending = append(pending, "pod "+p.Name+" not running with an address")
		}
		if p.Status.PodIP != "" {
			podByIP[p.Status.PodIP] = p.Name
		}
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	sliceList, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	epList, err := cs.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	slicesOf := map[string]int{}
	for i := range sliceList.Items {
		sl := &sliceList.Items[i]
		svc := sl.Labels[discoveryv1.LabelServiceName]
		slicesOf[svc]++
		putSlice(out, fmt.Sprintf("Service %s %s", svc, sl.AddressType), sl, n)
	}
	endpointsOf := map[string]*corev1.Endpoints{}
	for i := range epList.Items {
		ep := &epList.Items[i]
		endpointsOf[ep.Name] = ep
		putEndpoints(out, "Endpoints "+ep.Name, ep, podByIP, n)
	}
	for _, svc := range svcs.Items {
		if svc.Spec.Selector != nil {
			if slicesOf[svc.Name] == 0 {
				pending = append(pending, "Service "+svc.Name+" has no slice")
			}
			if endpointsOf[svc.Name] == nil {
				pending = append(pending, "Service "+svc.Name+" has no Endpoints")
			}
			// Every running pod it selects is in its slices, a pod it no longer selects is
			// not, and a pod being deleted shows as terminating.
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			for _, p := range pods {
				v, in := out[fmt.Sprintf("Service %s IPv4 endpoint Pod/%s", svc.Name, p.Name)]
				switch selected := sel.Matches(labels.Set(p.Labels)); {
				case selected && p.DeletionTimestamp == nil && p.Status.PodIP != "" && !in:
					pending = append(pending, "pod "+p.Name+" not yet in Service "+svc.Name+"'s slices")
				case !selected && in:
					pending = append(pending, "pod "+p.Name+" still in Service "+svc.Name+"'s slices")
				case p.DeletionTimestamp != nil && in && !strings.Contains(v, "terminating=true"):
					pending = append(pending, "pod "+p.Name+" not yet terminating in Service "+svc.Name+"'s slices")
				}
			}
		} else if ep := endpointsOf[svc.Name]; ep != nil {
			switch skip := ep.Labels[discoveryv1.LabelSkipMirror] == "true"; {
			case !skip && slicesOf[svc.Name] == 0:
				pending = append(pending, "Endpoints "+svc.Name+" not mirrored yet")
			case skip && slicesOf[svc.Name] > 0:
				pending = append(pending, "Endpoints "+svc.Name+" says skip-mirror, its slices remain")
			}
		}
	}
	// The slices and Endpoints of a deleted Service go (the garbage collector, the
	// Endpoints controller).
	for name := range slicesOf {
		if !slices.ContainsFunc(svcs.Items, func(s corev1.Service) bool { return s.Name == name }) {
			pending = append(pending, "slices of the deleted Service "+name+" remain")
		}
	}
	for name := range endpointsOf {
		if !slices.ContainsFunc(svcs.Items, func(s corev1.Service) bool { return s.Name == name }) {
			pending = append(pending, "Endpoints of the deleted Service "+name+" remain")
		}
	}
	for svc, k := range slicesOf {
		out["Service "+svc+" slices"] = fmt.Sprint(k)
	}
	es := eventSet{withMessages: true}
	var lines []string
	for i := range events {
		ev := &events[i]
		if !slices.Contains(endpointsControllers, ev.Source.Component) {
			continue
		}
		es.add(ev.InvolvedObject.Kind+"/"+ev.InvolvedObject.Name, ev, n.text)
	}
	es.put(out)
	lines = append(lines, es.lines...)
	return view{values: out, pending: pending, events: lines}, nil
}

// putSlice records a slice's content under p ("Service <name> <addressType>"): each
// endpoint by its target (or address), the ports, labels, annotations and owners. Slices
// of one Service and address type fold into one record, as their names and the spread of
// endpoints over them are the controller's choice.
func putSlice(out flat, p string, sl *discoveryv1.EndpointSlice, n normaliser) {
	for _, e := range sl.Endpoints {
		id := strings.Join(e.Addresses, ",")
		if e.TargetRef != nil {
			id = e.TargetRef.Kind + "/" + n.text(e.TargetRef.Name)
		}
		c := e.Conditions
		out[p+" endpoint "+id] = fmt.Sprintf("ready=%s serving=%s terminating=%s hostname=%s node=%v zone=%s addresses=%d",
			ptr(c.Ready), ptr(c.Serving), ptr(c.Terminating), ptr(e.Hostname), e.NodeName != nil, ptr(e.Zone), len(e.Addresses))
	}
	var ports []string
	for _, port := range sl.Ports {
		ports = append(ports, fmt.Sprintf("%s/%s/%s", ptr(port.Name), ptr(port.Port), ptr(port.Protocol)))
	}
	sort.Strings(ports)
	key := p + " ports " + strings.Join(ports, " ")
	out[key] = "present"
	for k, v := range sl.Labels {
		out[p+" label "+k] = n.text(v)
	}
	for k, v := range sl.Annotations {
		if k == corev1.EndpointsLastChangeTriggerTime {
			continue // timing-dependent: see the scenario's comment
		}
		out[p+" annotation "+k] = n.text(v)
	}
	putOwners(out, p, sl.OwnerReferences, n.text)
}

// putEndpoints records an Endpoints' addresses (by pod, or by address when no pod has it),
// ports, labels and annotations.
func putEndpoints(out flat, p string, ep *corev1.Endpoints, podByIP map[string]string, n normaliser) {
	addr := func(a corev1.EndpointAddress) string {
		if a.TargetRef != nil {
			return a.TargetRef.Kind + "/" + n.text(a.TargetRef.Name)
		}
		if pod, ok := podByIP[a.IP]; ok {
			return "pod " + pod
		}
		return a.IP
	}
	for _, sub := range ep.Subsets {
		var ports []string
		for _, port := range sub.Ports {
			ports = append(ports, fmt.Sprintf("%s/%d/%s", port.Name, port.Port, port.Protocol))
		}
		sort.Strings(ports)
		ps := strings.Join(ports, " ")
		for _, a := range sub.Addresses {
			out[p+" ready "+addr(a)+" ports "+ps] = fmt.Sprintf("hostname=%s node=%v", a.Hostname, a.NodeName != nil)
		}
		for _, a := range sub.NotReadyAddresses {
			out[p+" not ready "+addr(a)+" ports "+ps] = fmt.Sprintf("hostname=%s node=%v", a.Hostname, a.NodeName != nil)
		}
	}
	for k, v := range ep.Labels {
		out[p+" label "+k] = n.text(v)
	}
	for k, v := range ep.Annotations {
		if k == corev1.EndpointsLastChangeTriggerTime {
			continue // timing-dependent: see the scenario's comment
		}
		out[p+" annotation "+k] = n.text(v)
	}
}
