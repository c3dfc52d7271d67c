package endpoints

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	esImage = "registry.k8s.io/pause:3.10"
	// esSettle bounds how long the slices may take to show a change.
	esSettle = 60 * time.Second
	// esManagedBy is the managed-by label value of the controller's slices.
	esManagedBy = "endpointslice-controller.k8s.io"
	// esHold is a finalizer that keeps a deleted pod terminating (kwok deletes a pod being
	// deleted at once).
	esHold = "kshard.io/e2e-hold"
	// shardMaxEndpointsPerSlice is TestMain's --max-endpoints-per-slice for kshard.
	shardMaxEndpointsPerSlice = 3
)

// esEnv is one EndpointSlice test's namespace.
type esEnv struct {
	t  *testing.T
	cs kubernetes.Interface
	ns string
}

// newESEnv gives the test its own namespace; a failed test logs its pods, slices and
// events.
func newESEnv(t *testing.T) *esEnv {
	t.Helper()
	f := framework.Get(t)
	e := &esEnv{t: t, cs: f.Client, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

// maxEndpointsPerSlice is the limit of whoever runs the controller.
func maxEndpointsPerSlice(t *testing.T) int {
	if framework.RunningControllers(t).KShard != nil {
		return shardMaxEndpointsPerSlice
	}
	return 100 // upstream's default
}

func (e *esEnv) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s; %s\n", e.ns, framework.RunningControllers(e.t))
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "pod %s ip=%s ready=%v node=%s deleting=%v labels=%v\n", p.Name, p.Status.PodIP, podReady(&p),
				p.Spec.NodeName, p.DeletionTimestamp != nil, p.Labels)
		}
	}
	if l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			fmt.Fprintf(&b, "slice %s gen=%d rv=%s labels=%v ports=%s endpoints=%s\n", s.Name, s.Generation, s.ResourceVersion,
				s.Labels, portsOf(&s), strings.Join(endpointsOf(&s), ", "))
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range l.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type,
				ev.Reason, ev.Count, ev.Source.Component, ev.Message)
		}
	}
	e.t.Log(b.String())
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod creates a bare pod labelled app=app with a container port named "web" (8080),
// scheduled to a kwok node, which makes it Running and Ready with a pod IP.
func (e *esEnv) pod(name, app string, opts ...func(*corev1.Pod)) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: esImage,
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
	for _, o := range opts {
		o(p)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
}

func held(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, esHold) }

// waitReady waits until n pods of app are Ready with an IP.
func (e *esEnv) waitReady(app string, n int) {
	e.t.Helper()
	framework.Eventually(e.t, esSettle, fmt.Sprintf("%d ready pods of %s", n, app), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range l.Items {
			if podReady(&p) && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != n {
			return false, fmt.Errorf("%d ready", ready)
		}
		return true, nil
	})
}

// service creates a Service selecting app=app with a port "http" to the pods' named port
// "web" and a port "metrics" to 9090.
func (e *esEnv) service(name, app string, opts ...func(*corev1.Service)) {
	e.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	if _, err := e.cs.CoreV1().Services(e.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating service %s: %v", name, err)
	}
}

// setReady writes the pod's Ready condition through the status subresource, as the
// kubelet would.
func (e *esEnv) setReady(pod string, ready bool) {
	e.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
		}
		_, err = e.cs.CoreV1().Pods(e.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("setting pod %s ready=%v: %v", pod, ready, err)
	}
}

// release removes the test's finalizer from a pod.
func (e *esEnv) release(pod string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []string
		for _, f := range p.Finalizers {
			if f != esHold {
				keep = append(keep, f)
			}
		}
		p.Finalizers = keep
		_, err = e.cs.CoreV1().Pods(e.ns).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("releasing pod %s: %v", pod, err)
	}
}

// slices returns the controller's slices of svc, sorted by name.
func (e *esEnv) slices(ctx context.Context, svc string) ([]discoveryv1.EndpointSlice, error) {
	l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=" + esManagedBy})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

// cond is an endpoint's conditions as "ready/serving/terminating".
func cond(ready, serving, terminating bool) string {
	return fmt.Sprintf("%v/%v/%v", ready, serving, terminating)
}

// want is what a Service's slices must hold: its endpoints by pod name, and the ports.
type want struct {
	endpoints map[string]string // pod → cond(...)
	ports     string            // portsOf
}

// defaultPorts are the ports of service(): http resolved to the pods' "web" port.
const defaultPorts = "http/TCP/8080 metrics/TCP/9090"

// check compares a Service's slices with w, and checks what every slice of the
// controller must be: its owner, IPv4, within the per-slice limit, each pod in one slice
// only; a Service always has at least one (the placeholder when it has no endpoints).
func (e *esEnv) check(svc string, slices []discoveryv1.EndpointSlice, w want, max int) error {
	if len(slices) == 0 {
		return fmt.Errorf("no slices")
	}
	got := map[string]string{}
	for _, s := range slices {
		if s.DeletionTimestamp != nil {
			return fmt.Errorf("slice %s is being deleted", s.Name)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Service" || s.OwnerReferences[0].Name != svc ||
			!ptr.Deref(s.OwnerReferences[0].Controller, false) {
			return fmt.Errorf("slice %s owners %v", s.Name, s.OwnerReferences)
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			return fmt.Errorf("slice %s address type %s", s.Name, s.AddressType)
		}
		if len(s.Endpoints) > max {
			return fmt.Errorf("slice %s has %d endpoints, more than %d", s.Name, len(s.Endpoints), max)
		}
		if len(s.Endpoints) > 0 && portsOf(&s) != w.ports {
			return fmt.Errorf("slice %s ports %q, want %q", s.Name, portsOf(&s), w.ports)
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				return fmt.Errorf("slice %s: endpoint %v without a pod", s.Name, ep.Addresses)
			}
			if _, dup := got[ep.TargetRef.Name]; dup {
				return fmt.Errorf("pod %s in two endpoints", ep.TargetRef.Name)
			}
			got[ep.TargetRef.Name] = cond(ptr.Deref(ep.Conditions.Ready, false), ptr.Deref(ep.Conditions.Serving, false),
				ptr.Deref(ep.Conditions.Terminating, false))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(w.endpoints) {
		return fmt.Errorf("endpoints %v, want %v", got, w.endpoints)
	}
	return nil
}

// waitSlices waits until svc's slices pass check with w, and returns them.
func (e *esEnv) waitSlices(svc string, w want) []discoveryv1.EndpointSlice {
	e.t.Helper()
	max := maxEndpointsPerSlice(e.t)
	var out []discoveryv1.EndpointSlice
	framework.Eventually(e.t, esSettle, "slices of "+svc, func(ctx context.Context) (bool, error) {
		s, err := e.slices(ctx, svc)
		if err != nil {
			return false, err
		}
		if err := e.check(svc, s, w, max); err != nil {
			return false, err
		}
		out = s
		return true, nil
	})
	return out
}

func portsOf(s *discoveryv1.EndpointSlice) string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s/%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0)))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func endpointsOf(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range s.Endpoints {
		name := "?"
		if ep.TargetRef != nil {
			name = ep.TargetRef.Name
		}
		out = append(out, fmt.Sprintf("%s %v %s", name, ep.Addresses, cond(ptr.Deref(ep.Conditions.Ready, false),
			ptr.Deref(ep.Conditions.Serving, false), ptr.Deref(ep.Conditions.Terminating, false))))
	}
	return out
}

// readyAll is want's endpoints for pods all ready.
func readyAll(pods ...string) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		out[p] = cond(true, true, false)
	}
	return out
}

// generations sums the slices' generations and lists their UIDs: a write of a slice's
// endpoints raises its generation by one.
func generations(slices []discoveryv1.EndpointSlice) (int64, []string) {
	var sum int64
	var uids []string
	for _, s := range slices {
		sum += s.Generation
		uids = append(uids, string(s.UID))
	}
	sort.Strings(uids)
	return sum, uids
}
