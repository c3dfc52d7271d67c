package endpointstress

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/endpointstress/invariant"
)

const (
	svcLabel   = "kshard.io/es-svc"   // the Service a pod belongs to
	groupLabel = "kshard.io/es-group" // a or b: a narrowed selector takes only a
	portName   = "http"
)

// nsModel is the test's model of one namespace: its Services' selectors and its pods.
// Only the namespace's driver changes it (and the final check reads it after).
type nsModel struct {
	ns    string
	node  string
	svcs  []*svcModel
	pods  map[string]*podModel
	next  int
	stats *stats
}

type svcModel struct {
	name   string
	narrow bool // the selector also requires group a
}

type podModel struct {
	name, svc, group string
	ready            bool
}

func (m *nsModel) svc(name string) *svcModel {
	for _, s := range m.svcs {
		if s.name == name {
			return s
		}
	}
	return nil
}

// members is what the Service's slices are to show: its pods and their readiness.
func (m *nsModel) members(name string) map[string]bool {
	s := m.svc(name)
	out := map[string]bool{}
	for _, p := range m.pods {
		if p.svc == name && (!s.narrow || p.group == "a") {
			out[p.name] = p.ready
		}
	}
	return out
}

func (m *nsModel) podsOf(name string, group string) []string {
	var out []string
	for _, p := range m.pods {
		if p.svc == name && (group == "" || p.group == group) {
			out = append(out, p.name)
		}
	}
	sort.Strings(out)
	return out
}

func newService(name string, narrow bool) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: selector(name, narrow),
		Ports: []corev1.ServicePort{{Name: portName, Port: 80, TargetPort: intstr.FromString(portName)}},
	}}
}

func selector(svc string, narrow bool) map[string]string {
	s := map[string]string{svcLabel: svc}
	if narrow {
		s[groupLabel] = "a"
	}
	return s
}

// createPod creates a pod on the test's kwok node: kwok makes it Running and Ready with
// an IP (its pod-ready stage, which only takes Pending pods: the test's readiness flips of
// a Running pod stay as written).
func createPod(ctx context.Context, cs kubernetes.Interface, ns, node string, p *podModel) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{svcLabel: p.svc, groupLabel: p.group}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: portName, ContainerPort: 8080}}}}}}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// readinessPatch is a strategic merge patch of a pod's Ready condition (merged by type).
func readinessPatch(ready bool) []byte {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{
		{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}}})
	return p
}

func labelPatch(svc string) []byte {
	p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{svcLabel: svc}}})
	return p
}

// stats counts the churn.
type stats struct {
	flips, deletes, creates, relabels, selectors atomic.Int64
	// slow counts intents not shown by the slices within reflectTimeout; lastSlow says
	// which and what was left.
	slow     atomic.Int64
	mu       sync.Mutex
	lastSlow string
}

// reflectTimeout bounds the wait for an intent to show in the slices; an intent not
// shown by then is counted (the final check then fails on a Service that never got there).
const reflectTimeout = 2 * time.Minute

// driver churns one namespace until deadline: one intent at a time, each recorded with the
// checker before its request, then waited for until the slices show it.
type driver struct {
	cs       kubernetes.Interface
	chk      *invariant.Checker
	m        *nsModel
	rng      *rand.Rand
	podsPer  int
	deadline time.Time
}

func (d *driver) run(ctx context.Context) error {
	for {
		pause := 100*time.Millisecond + time.Duration(d.rng.Int64N(int64(900*time.Millisecond)))
		if time.Now().Add(pause).After(d.deadline) {
			return nil
		}
		time.Sleep(pause)
		if err := d.step(ctx); err != nil {
			return fmt.Errorf("namespace %s: %w", d.m.ns, err)
		}
	}
}

func (d *driver) step(ctx context.Context) error {
	m := d.m
	svc := m.svcs[d.rng.IntN(len(m.svcs))]
	pods := m.podsOf(svc.name, "")
	r := d.rng.IntN(100)
	switch {
	case r < 45 && len(pods) > 0: // readiness flip
		p := m.pods[pods[d.rng.IntN(len(pods))]]
		d.chk.Begin(m.ns, []string{svc.name}, []string{p.name})
		if _, err := d.cs.CoreV1().Pods(m.ns).Patch(ctx, p.name, types.StrategicMergePatchType, readinessPatch(!p.ready),
			metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("flipping pod %s: %w", p.name, err)
		}
		p.ready = !p.ready
		m.stats.flips.Add(1)
		return d.expect(ctx, svc.name)
	case r < 55 && len(pods) > d.podsPer/2: // delete (at once: no kubelet ends a graceful one)
		p := m.pods[pods[d.rng.IntN(len(pods))]]
		d.chk.Begin(m.ns, []string{svc.name}, []string{p.name})
		if err := d.cs.CoreV1().Pods(m.ns).Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return fmt.Errorf("deleting pod %s: %w", p.name, err)
		}
		delete(m.pods, p.name)
		m.stats.deletes.Add(1)
		return d.expect(ctx, svc.name)
	case r < 65 && len(pods) < d.podsPer*3/2: // create
		m.next++
		p := &podModel{name: fmt.Sprintf("p-%04d", m.next), svc: svc.name, group: []string{"a", "b"}[d.rng.IntN(2)], ready: true}
		d.chk.Begin(m.ns, []string{svc.name}, []string{p.name})
		if err := createPod(ctx, d.cs, m.ns, m.node, p); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.name, err)
		}
		m.pods[p.name] = p
		m.stats.creates.Add(1)
		return d.expect(ctx, svc.name)
	case r < 90 && len(pods) > d.podsPer/2 && len(m.svcs) > 1: // relabel: move a pod to another Service
		p := m.pods[pods[d.rng.IntN(len(pods))]]
		to := m.svcs[d.rng.IntN(len(m.svcs))]
		if to == svc {
			return nil
		}
		d.chk.Begin(m.ns, []string{svc.name, to.name}, []string{p.name})
		if _, err := d.cs.CoreV1().Pods(m.ns).Patch(ctx, p.name, types.StrategicMergePatchType, labelPatch(to.name),
			metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("relabelling pod %s: %w", p.name, err)
		}
		p.svc = to.name
		m.stats.relabels.Add(1)
		return d.expect(ctx, svc.name, to.name)
	case r >= 90: // the Service's selector narrowed to group a, or widened again
		d.chk.Begin(m.ns, []string{svc.name}, m.podsOf(svc.name, "b"))
		s, err := d.cs.CoreV1().Services(m.ns).Get(ctx, svc.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Selector = selector(svc.name, !svc.narrow)
		if _, err := d.cs.CoreV1().Services(m.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("changing the selector of Service %s: %w", svc.name, err)
		}
		svc.narrow = !svc.narrow
		m.stats.selectors.Add(1)
		return d.expect(ctx, svc.name)
	}
	return nil
}

// expect gives the checker the Services' new states and waits until their slices show
// them (or reflectTimeout passes: counted, the final check judges).
func (d *driver) expect(ctx context.Context, svcs ...string) error {
	for _, s := range svcs {
		d.chk.Expect(d.m.ns, s, d.m.members(s))
	}
	for _, s := range svcs {
		for {
			out, since := d.chk.Outstanding(d.m.ns, s)
			if !out {
				break
			}
			if time.Since(since) > reflectTimeout {
				u, _ := d.chk.Union(d.m.ns, s)
				d.m.stats.slow.Add(1)
				d.m.stats.mu.Lock()
				d.m.stats.lastSlow = fmt.Sprintf("Service %s/%s not as the test left it %s after the change: %s",
					d.m.ns, s, reflectTimeout, invariant.Diff(u, d.m.members(s)))
				d.m.stats.mu.Unlock()
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// populate creates a namespace's Services and pods (podsPer each, groups a and b
// alternating), each Service begun before its first object and expected after its last.
func populate(ctx context.Context, cs kubernetes.Interface, chk *invariant.Checker, m *nsModel, podsPer int) error {
	for _, s := range m.svcs {
		chk.AddService(m.ns, s.name)
		chk.Begin(m.ns, []string{s.name}, nil)
		if _, err := cs.CoreV1().Services(m.ns).Create(ctx, newService(s.name, s.narrow), metav1.CreateOptions{}); err != nil {
			return err
		}
		for j := range podsPer {
			m.next++
			p := &podModel{name: fmt.Sprintf("p-%04d", m.next), svc: s.name, group: []string{"a", "b"}[j%2], ready: true}
			if err := createPod(ctx, cs, m.ns, m.node, p); err != nil {
				return err
			}
			m.pods[p.name] = p
		}
	}
	for _, s := range m.svcs {
		chk.Expect(m.ns, s.name, m.members(s.name))
	}
	return nil
}

// forceDeletePods deletes every pod of a namespace at once (no kubelet ends graceful
// deletions on the test's nodes), so that the namespace can go.
func forceDeletePods(ctx context.Context, cs kubernetes.Interface, ns string) error {
	err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
