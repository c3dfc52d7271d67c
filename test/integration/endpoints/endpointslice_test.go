package endpoints

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kshard/kshard/test/framework"
)

// TestEndpointSliceForService: a Service over three pods gets slices listing each pod
// once, ready, with the named target port resolved from the pods' container port.
func TestEndpointSliceForService(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	for i := range 3 {
		e.pod(fmt.Sprintf("web-%d", i), "web")
	}
	e.waitReady("web", 3)
	e.service("web", "web")
	e.waitSlices("web", want{endpoints: readyAll("web-0", "web-1", "web-2"), ports: defaultPorts})

	// kshard's shards export upstream's series: the module's endpoint_slice_controller_*
	// and the workqueue named endpoint_slice, with the shard label.
	k := framework.RunningControllers(t).KShard
	if k == nil {
		return
	}
	framework.Eventually(t, esSettle, "the shards' endpointslice series", func(ctx context.Context) (bool, error) {
		var syncs, creates, adds float64
		for name, s := range k.Shards {
			if s.Exited() {
				continue
			}
			m, err := framework.Scrape(ctx, s.HTTPURL)
			if err != nil {
				return false, err
			}
			syncs += m.Value("endpoint_slice_controller_syncs", `result="success"`, `shard="`+name+`"`)
			creates += m.Value("endpoint_slice_controller_changes", `operation="create"`, `shard="`+name+`"`)
			adds += m.Value("kshard_workqueue_adds_total", `name="endpoint_slice"`, `shard="`+name+`"`)
		}
		if syncs == 0 || creates == 0 || adds == 0 {
			return false, fmt.Errorf("syncs{success} %v, changes{create} %v, kshard_workqueue_adds_total{endpoint_slice} %v", syncs, creates, adds)
		}
		return true, nil
	})
}

// TestEndpointSliceReadiness: a pod turning not Ready is listed not ready and not
// serving, and ready again when it turns Ready; a pod being deleted (held by a
// finalizer) is listed terminating, not ready, serving as its Ready condition says; once
// gone, it is no longer listed.
func TestEndpointSliceReadiness(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	e.pod("web-0", "web")
	e.pod("web-1", "web", held)
	e.waitReady("web", 2)
	e.service("web", "web")
	e.waitSlices("web", want{endpoints: readyAll("web-0", "web-1"), ports: defaultPorts})

	e.setReady("web-0", false)
	e.waitSlices("web", want{endpoints: map[string]string{"web-0": cond(false, false, false), "web-1": cond(true, true, false)}, ports: defaultPorts})
	e.setReady("web-0", true)
	e.waitSlices("web", want{endpoints: readyAll("web-0", "web-1"), ports: defaultPorts})

	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("web-1 after its delete: %v, %v; want it held terminating", p, err)
	}
	e.waitSlices("web", want{endpoints: map[string]string{"web-0": cond(true, true, false), "web-1": cond(false, podReady(p), true)}, ports: defaultPorts})
	e.setReady("web-1", !podReady(p))
	e.waitSlices("web", want{endpoints: map[string]string{"web-0": cond(true, true, false), "web-1": cond(false, !podReady(p), true)}, ports: defaultPorts})
	e.release("web-1")
	e.waitSlices("web", want{endpoints: readyAll("web-0"), ports: defaultPorts})
}

// TestEndpointSlicePublishNotReadyAddresses: with publishNotReadyAddresses a pod not
// Ready is listed ready (not serving).
func TestEndpointSlicePublishNotReadyAddresses(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	e.pod("web-0", "web")
	e.pod("web-1", "web")
	e.waitReady("web", 2)
	e.setReady("web-1", false)
	e.service("web", "web", func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
	e.waitSlices("web", want{endpoints: map[string]string{"web-0": cond(true, true, false), "web-1": cond(true, false, false)}, ports: defaultPorts})
}

// TestEndpointSlicePlaceholder: a Service whose selector matches no pod gets one slice
// without endpoints (and without ports); a matching pod is then listed in the slices.
func TestEndpointSlicePlaceholder(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	e.service("web", "web")
	s := e.waitSlices("web", want{endpoints: map[string]string{}})
	if len(s) != 1 || len(s[0].Ports) != 0 {
		t.Fatalf("slices %v, want one placeholder without ports", s)
	}
	e.pod("web-0", "web")
	e.waitReady("web", 1)
	s = e.waitSlices("web", want{endpoints: readyAll("web-0"), ports: defaultPorts})
	if len(s) != 1 {
		t.Errorf("%d slices for one pod, want 1", len(s))
	}
}

// TestEndpointSliceSplit: more pods than --max-endpoints-per-slice are spread over as
// many full slices as they need; each pod listed once.
func TestEndpointSliceSplit(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	const n = 7
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("web-%d", i))
		e.pod(names[i], "web")
	}
	e.waitReady("web", n)
	e.service("web", "web")
	max := maxEndpointsPerSlice(t)
	s := e.waitSlices("web", want{endpoints: readyAll(names...), ports: defaultPorts})
	if wantSlices := (n + max - 1) / max; len(s) != wantSlices {
		t.Errorf("%d slices for %d pods at %d per slice, want %d", len(s), n, max, wantSlices)
	}
}

// TestEndpointSliceServiceDeleted: a deleted Service's slices are deleted (by the garbage
// collector, through their owner reference).
func TestEndpointSliceServiceDeleted(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	e.pod("web-0", "web")
	e.waitReady("web", 1)
	e.service("web", "web")
	e.waitSlices("web", want{endpoints: readyAll("web-0"), ports: defaultPorts})
	if err := e.cs.CoreV1().Services(e.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, esSettle, "the deleted Service's slices gone", func(ctx context.Context) (bool, error) {
		s, err := e.slices(ctx, "web")
		if err != nil {
			return false, err
		}
		if len(s) > 0 {
			return false, fmt.Errorf("%d slices left", len(s))
		}
		return true, nil
	})
}

// TestEndpointSliceHandEditReverted: a slice whose endpoints someone else changed is
// written back.
func TestEndpointSliceHandEditReverted(t *testing.T) {
	t.Parallel()
	e := newESEnv(t)
	e.pod("web-0", "web")
	e.pod("web-1", "web")
	e.waitReady("web", 2)
	e.service("web", "web")
	e.waitSlices("web", want{endpoints: readyAll("web-0", "web-1"), ports: defaultPorts})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := e.slices(context.Background(), "web")
		if err != nil {
			return err
		}
		edited := s[0].DeepCopy()
		edited.Endpoints = edited.Endpoints[:0]
		_, err = e.cs.DiscoveryV1().EndpointSlices(e.ns).Update(context.Background(), edited, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.waitSlices("web", want{endpoints: readyAll("web-0", "web-1"), ports: defaultPorts})
}

// TestEndpointSliceAcrossHandoff: a Service's namespace moves to another shard (a spare
// joins, the owner gets SIGTERM and hands its partitions over) while its pods' readiness
// flips: one flip before the move, one while it moves, one after. The slices end as the
// pods are, each pod listed once, and the new owner takes the slices over as they are:
// the same slices (no delete and create), written at most once per flip (a takeover that
// rewrote equal slices, or two shards writing in turn, would raise their generations
// more), and left alone once they are right.
func TestEndpointSliceAcrossHandoff(t *testing.T) {
	testEndpointSliceMove(t, func(owner *framework.Shard) {
		if err := owner.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}, true)
}

// TestEndpointSliceAfterOwnerKilled: as TestEndpointSliceAcrossHandoff, but the owner is
// SIGKILLed: the flip made while no shard works the namespace is written by the shard
// the coordinator gives it to once the dead one's session has lapsed.
func TestEndpointSliceAfterOwnerKilled(t *testing.T) {
	testEndpointSliceMove(t, func(owner *framework.Shard) { owner.Kill() }, false)
}

// testEndpointSliceMove moves a namespace with stop (not parallel: it stops one of the
// package's shards, after a spare joined).
func testEndpointSliceMove(t *testing.T, stop func(owner *framework.Shard), graceful bool) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the endpointslice controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newESEnv(t)
	pods := []string{"web-0", "web-1", "web-2", "web-3"}
	for _, p := range pods {
		e.pod(p, "web")
	}
	e.waitReady("web", len(pods))
	e.service("web", "web")
	before := e.waitSlices("web", want{endpoints: readyAll(pods...), ports: defaultPorts})
	gen0, uids0 := generations(before)
	owner := k.StableOwner(t, e.ns)

	// Before the move, on the old owner.
	e.setReady("web-0", false)
	w := want{endpoints: readyAll(pods...), ports: defaultPorts}
	w.endpoints["web-0"] = cond(false, false, false)
	e.waitSlices("web", w)

	at := time.Now()
	stop(owner)
	e.setReady("web-1", false)
	w.endpoints["web-1"] = cond(false, false, false)
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if graceful {
		if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
			t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
		}
	}
	t.Logf("namespace %s moved %s → %s, seen %s after the stop", e.ns, owner.Name, to.Name, seen.Sub(at).Round(time.Millisecond))
	e.waitSlices("web", w)

	// After the move, on the new owner alone.
	e.setReady("web-0", true)
	w.endpoints["web-0"] = cond(true, true, false)
	after := e.waitSlices("web", w)
	k.WaitAllOwned(t, 90*time.Second)

	gen1, uids1 := generations(after)
	if fmt.Sprint(uids1) != fmt.Sprint(uids0) {
		t.Errorf("slices %v after the move, %v before: the new owner replaced them", uids1, uids0)
	}
	t.Logf("the slices' generations rose by %d over 3 readiness flips", gen1-gen0)
	if gen1-gen0 > 3 {
		t.Errorf("the slices' generations rose by %d over 3 readiness flips: written more than once per flip", gen1-gen0)
	}
	// No shard failed a sync on the way (FailedToUpdateEndpointSlices and the like).
	evs, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Source.Component == "endpoint-slice-controller" && ev.Type == corev1.EventTypeWarning {
			t.Errorf("warning event %s on %s/%s: %s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message)
		}
	}
	// Left alone once right: no further write for a few seconds (a write by a shard
	// that still worked the namespace would show here).
	rv := map[string]string{}
	for _, s := range after {
		rv[s.Name] = s.ResourceVersion
	}
	quiet := time.Now().Add(3 * time.Second)
	for time.Now().Before(quiet) {
		s, err := e.slices(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range s {
			if rv[sl.Name] != sl.ResourceVersion {
				t.Fatalf("slice %s written again (resourceVersion %s → %s) after it was right: %v", sl.Name, rv[sl.Name],
					sl.ResourceVersion, endpointsOf(&sl))
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
