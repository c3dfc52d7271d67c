//lint:file-ignore SA1019 the Endpoints controller writes core/v1 Endpoints, deprecated in favour of EndpointSlices.

package endpoints

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/test/framework"
)

// TestEndpointsFollowPods: a Service's Endpoints lists its Ready pods' addresses on a named
// target port (resolved per pod: a pod serving it on another number is a subset of its
// own) and a numbered one, with the Service's labels and managed-by; a readiness flip moves an address to notReadyAddresses and back; a deleted
// pod, a relabelled pod and a pod of another label are not listed.
func TestEndpointsFollowPods(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("web", "web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)})
	})
	e.pod("web-0", "web", 8080)
	e.pod("web-1", "web", 8080)
	e.pod("web-2", "web", 8081)
	e.pod("db-0", "db", 8080)
	ips := e.waitPodIPs("web-0", "web-1", "web-2", "db-0")
	entries := func(pod string, httpPort int32, ready bool) []string {
		return []string{epAddr(ips[pod], pod, httpPort, "http", ready, ""), epAddr(ips[pod], pod, 9090, "metrics", ready, "")}
	}
	all := func(ready1 bool, pods ...string) []string {
		var out []string
		for _, p := range pods {
			port := int32(8080)
			if p == "web-2" {
				port = 8081
			}
			out = append(out, entries(p, port, p != "web-1" || ready1)...)
		}
		return epWant(out...)
	}
	ep := e.waitEndpoints("web", all(true, "web-0", "web-1", "web-2"))
	e.wantLabels(ep, false)
	if _, ok := ep.Annotations[corev1.EndpointsOverCapacity]; ok {
		t.Errorf("annotations %v: over-capacity on a small Endpoints", ep.Annotations)
	}
	// Repacked: http:8080 on web-0 and web-1, http:8081 on web-2, metrics on all three.
	if len(ep.Subsets) != 3 {
		t.Errorf("%d subsets, want 3 (web-2 serves http on another port): %+v", len(ep.Subsets), ep.Subsets)
	}

	e.setReady("web-1", false)
	e.waitEndpoints("web", all(false, "web-0", "web-1", "web-2"))
	e.setReady("web-1", true)
	e.waitEndpoints("web", all(true, "web-0", "web-1", "web-2"))

	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("web", all(true, "web-1", "web-2"))
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(context.Background(), "web-2", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("web", all(true, "web-1"))
}

// TestEndpointsPublishNotReadyHeadless: a headless Service without ports that publishes
// not-ready addresses lists every pod with an IP as ready, without ports, a pod's hostname
// when its subdomain is the Service; its Endpoints has the headless label. A Service
// without a selector gets no Endpoints from the controller.
func TestEndpointsPublishNotReadyHeadless(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("db", "db", func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.Ports, s.Spec.PublishNotReadyAddresses = corev1.ClusterIPNone, nil, true
	})
	e.service("manual", "")
	e.pod("db-0", "db", 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" })
	e.pod("db-1", "db", 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-1", "elsewhere" })
	ips := e.waitPodIPs("db-0", "db-1")
	e.setReady("db-1", false)
	ep := e.waitEndpoints("db", epWant(epAddr(ips["db-0"], "db-0", 0, "", true, "db-0"), epAddr(ips["db-1"], "db-1", 0, "", true, "")))
	e.wantLabels(ep, true)
	// The selector-less Service's Endpoints is nobody's to write: the one of the Service
	// with a selector, written after it was created, shows the controller got that far.
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Get(context.Background(), "manual", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("endpoints of the Service without a selector: %v, want none", err)
	}
}

// TestEndpointsEditedByHand: an Endpoints whose addresses and managed-by label a user
// changed is written back on the Service's next change (as upstream, which does not watch
// Endpoints updates); a deleted Endpoints is created again at once.
func TestEndpointsEditedByHand(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("web", "web")
	e.pod("web-0", "web", 8080)
	ips := e.waitPodIPs("web-0")
	wantAddrs := epWant(epAddr(ips["web-0"], "web-0", 8080, "http", true, ""))
	ep := e.waitEndpoints("web", wantAddrs)

	ep.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.99.99.99"}},
		Ports: []corev1.EndpointPort{{Name: "http", Port: 1}}}}
	delete(ep.Labels, epManagedBy)
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Update(context.Background(), ep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service's next change: touched again at every poll, since a sync that runs
	// before the controller's cache has the edit finds nothing to do (as upstream's).
	touches := 0
	framework.Eventually(t, waitTimeout, "endpoints web written back after the Service's change", func(ctx context.Context) (bool, error) {
		touches++
		e.touchService("web", fmt.Sprint(touches))
		got, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ep = got
		return slices.Equal(epFlatten(got), wantAddrs) && got.Labels[epManagedBy] == epControllerVal, nil
	})
	e.wantLabels(ep, false)

	if err := e.cs.CoreV1().Endpoints(e.ns).Delete(context.Background(), "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ep.UID}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "endpoints web created again", func(ctx context.Context) (bool, error) {
		got, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.UID != ep.UID && slices.Equal(epFlatten(got), wantAddrs), nil
	})
}

// TestEndpointsOverCapacity: a Service of 1,001 Ready kwok pods gets an Endpoints of the
// 1,000 addresses that come first in upstream's order (by IP, bytewise) and the
// over-capacity annotation; one pod fewer and the annotation goes, every address listed.
func TestEndpointsOverCapacity(t *testing.T) {
	t.Parallel()
	const n = 1001
	e := newEPEnv(t)
	e.service("big", "big", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080) })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("big-%04d", i)
	}
	var wg sync.WaitGroup
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for name := range work {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "big"}}, Spec: epPodSpec(len(name)+int(name[7]), 8080)}
				if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Errorf("creating pod %s: %v", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ips := e.waitPodIPs(names...)
	type a struct{ ip, pod string }
	var all []a
	for pod, ip := range ips {
		if strings.HasPrefix(pod, "big-") {
			all = append(all, a{ip, pod})
		}
	}
	// Upstream's order: IP bytewise, then pod UID (IPs are kwok's, distinct).
	slices.SortFunc(all, func(x, y a) int { return strings.Compare(x.ip, y.ip) })
	entries := func(as []a) []string {
		var out []string
		for _, x := range as {
			out = append(out, epAddr(x.ip, x.pod, 8080, "http", true, ""))
		}
		return epWant(out...)
	}
	ep := e.waitEndpoints("big", entries(all[:1000]))
	if got := ep.Annotations[corev1.EndpointsOverCapacity]; got != "truncated" {
		t.Errorf("over-capacity annotation %q, want truncated", got)
	}
	// Delete the last one of the order: the same 1,000, now all of them, no annotation.
	last := all[len(all)-1].pod
	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), last, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the over-capacity annotation removed", func(ctx context.Context) (bool, error) {
		ep, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, over := ep.Annotations[corev1.EndpointsOverCapacity]
		return !over && slices.Equal(epFlatten(ep), entries(all[:1000])), nil
	})
}

// TestEndpointsAcrossHandoff: a namespace moves to another shard (a spare joins, the
// owner gets SIGTERM and hands its partitions over) while a pod's readiness flips and a
// Service is deleted. After the move the new owner has: the Endpoints of the remaining
// Service equal to its pods (the flip included), the deleted Service's Endpoints gone, an
// Endpoints without a Service that no event ever queued (as one left when its Service was
// deleted while no shard worked the namespace) deleted on acquire, and a leader-election
// lock Endpoints kept. Not parallel: it stops one of the package's shards.
func TestEndpointsAcrossHandoff(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the Endpoints controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEPEnv(t)
	e.service("web", "web")
	e.service("gone", "web")
	e.pod("web-0", "web", 8080)
	e.pod("web-1", "web", 8080)
	ips := e.waitPodIPs("web-0", "web-1")
	both := func(ready1 bool) []string {
		return epWant(epAddr(ips["web-0"], "web-0", 8080, "http", true, ""), epAddr(ips["web-1"], "web-1", 8080, "http", ready1, ""))
	}
	e.waitEndpoints("web", both(true))
	e.waitEndpoints("gone", both(true))
	// Endpoints without a Service: creating one queues nothing (the controller handles
	// only deletes of Endpoints), so only an acquire's leftover check finds it.
	for _, ep := range []*corev1.Endpoints{
		{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{epManagedBy: epControllerVal}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lock", Annotations: map[string]string{epLeaderAnno: `{"holderIdentity":"x"}`}}},
	} {
		if _, err := e.cs.CoreV1().Endpoints(e.ns).Create(context.Background(), ep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	owner := k.StableOwner(t, e.ns)
	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.setReady("web-1", false)
	if err := e.cs.CoreV1().Services(e.ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	t.Logf("namespace %s handed over %s → %s, seen %s after SIGTERM", e.ns, owner.Name, to.Name, seen.Sub(at).Round(time.Millisecond))

	e.waitEndpoints("web", both(false))
	e.waitEndpointsGone("gone")
	e.waitEndpointsGone("orphan")
	// The new owner works the namespace: a change after the move is reflected.
	e.setReady("web-1", true)
	ep := e.waitEndpoints("web", both(true))
	e.wantLabels(ep, false)
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Get(context.Background(), "lock", metav1.GetOptions{}); err != nil {
		t.Errorf("the leader-election Endpoints after the move: %v, want it kept", err)
	}
}
