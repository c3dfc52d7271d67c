package volumes

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kshard/kshard/test/framework"
)

// createFailures is the ephemeral volume controller's count of failed claim creates.
const createFailures = "ephemeral_volume_controller_create_failures_total"

// TestClaimsAcrossHandoff: both claim controllers' work, started on one shard, is finished
// by the namespace's new owner (a spare joins, the owner gets SIGTERM and hands its
// partitions over), nothing done twice and nothing lost.
//
// pvc-protection: a claim deleted while a running pod uses it stays (deleting, with the
// finalizer) across the move; when the pod goes, the new owner lets it go, and never
// before: the claim's deletion comes after the pod's in etcd's order (resource
// versions). An unused claim deleted while the namespace moves goes too.
//
// ephemeral-volume: pods with a generic ephemeral volume are created one every 100ms
// before, during and after the move; each gets exactly one claim, controlled by the pod,
// created once (one UID per name over the whole test, none deleted), with no FailedBinding
// warning and no failed create on any shard (a create the new owner repeats because its
// caches missed the old owner's claim fails with AlreadyExists and is counted there).
// Not parallel: it stops one of the package's shards.
func TestClaimsAcrossHandoff(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the claim controllers: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := e.watchClaimsAndPods(ctx)
	failuresBefore := shardValues(t, k, createFailures)

	kept := e.createClaim("kept", "")
	freeBefore := e.createClaim("free-before", "")
	freeDuring := e.createClaim("free-during", "")
	e.createPod("user", onNode, withClaim("kept"))
	e.waitRunning("user")
	owner := k.StableOwner(t, e.ns)
	e.deleteClaim("kept")
	e.deleteClaim("free-before")
	// The unused claim went: the old owner worked the deletions. The used one stays.
	e.waitClaimGone("free-before", freeBefore.UID)
	e.waitClaim("being deleted, with the finalizer", "kept", func(c *corev1.PersistentVolumeClaim) bool {
		return c.UID == kept.UID && c.DeletionTimestamp != nil && hasFinalizer(c)
	})

	s := e.streamEphemeralPods(ctx, 100*time.Millisecond)
	framework.Eventually(t, timeout, "5 pods of the stream created before the move", func(context.Context) (bool, error) {
		return len(s.created()) >= 5, s.error()
	})
	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.deleteClaim("free-during")
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	n := len(s.created())
	framework.Eventually(t, timeout, "5 pods of the stream created after the move", func(context.Context) (bool, error) {
		return len(s.created()) >= n+5, s.error()
	})
	pods := s.stop()
	var before, during, after int
	for _, p := range pods {
		switch {
		case p.at.Before(at):
			before++
		case p.at.Before(seen):
			during++
		default:
			after++
		}
	}
	t.Logf("namespace %s handed over %s → %s, seen %s after SIGTERM; pods with an ephemeral volume created before %d, during %d, after %d",
		e.ns, owner.Name, to.Name, seen.Sub(at).Round(time.Millisecond), before, during, after)
	if during == 0 {
		t.Errorf("no pod created while the namespace moved: the test did not create pods around the move")
	}

	e.waitClaimGone("free-during", freeDuring.UID)
	for _, p := range pods {
		e.waitClaim("created for the pod", p.name+"-scratch", ownedBy(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, UID: p.uid}}))
	}
	// The used claim stayed across the move; it goes once its pod does.
	if c, err := e.claim(ctx, "kept"); err != nil || c == nil || c.UID != kept.UID || !hasFinalizer(c) {
		t.Fatalf("claim kept after the move: %+v, %v; want it deleting with the finalizer while user runs", c, err)
	}
	e.deletePod("user")
	e.waitClaimGone("kept", kept.UID)

	// What the watches saw, in etcd's order, once they have caught up with what the test
	// saw through GETs (each watch has its own delay).
	framework.Eventually(t, timeout, "the watches seeing every claim and both deletions", func(context.Context) (bool, error) {
		log.mu.Lock()
		defer log.mu.Unlock()
		if log.closed {
			t.Fatalf("a watch ended before the test did: the record is incomplete")
		}
		missing := 0
		for _, p := range pods {
			if len(log.claimUIDs[p.name+"-scratch"]) == 0 {
				missing++
			}
		}
		if log.podDeleted["user"] == 0 || log.claimDeleted[kept.UID] == 0 || missing > 0 {
			return false, fmt.Errorf("pod user deleted at %d, claim kept at %d, %d claims of the stream not seen",
				log.podDeleted["user"], log.claimDeleted[kept.UID], missing)
		}
		return true, nil
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	podGone, claimGone := log.podDeleted["user"], log.claimDeleted[kept.UID]
	if claimGone < podGone {
		t.Errorf("claim kept deleted at resource version %d, its pod user at %d: want the claim after the pod", claimGone, podGone)
	}
	for _, p := range pods {
		name := p.name + "-scratch"
		uids := log.claimUIDs[name]
		if len(uids) != 1 {
			t.Errorf("claim %s: created %d times (UIDs %v), want once", name, len(uids), uids)
			continue
		}
		if rv := log.claimDeleted[uids[0]]; rv != 0 {
			t.Errorf("claim %s deleted (resource version %d) while its pod lives", name, rv)
		}
	}
	evs, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Type == corev1.EventTypeWarning {
			t.Errorf("warning %s on %s/%s from %s x%d: %s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Source.Component, ev.Count, ev.Message)
		}
	}
	for name, v := range shardValues(t, k, createFailures) {
		if v != failuresBefore[name] {
			t.Errorf("shard %s: %s %v, was %v before the move: a claim create failed", name, createFailures, v, failuresBefore[name])
		}
	}
}

// shardValues scrapes metric from every live shard of k, by shard name.
func shardValues(t *testing.T, k *framework.KShard, metric string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name := range k.Live() {
		v, err := framework.Metric(context.Background(), k.Shards[name].HTTPURL, metric)
		if err != nil {
			t.Fatalf("scraping %s: %v", name, err)
		}
		out[name] = v
	}
	return out
}

// watchLog records, from watches of the namespace's claims and pods, every claim's UIDs by
// name in order of creation and the resource version at which each claim (by UID) and pod
// (by name) was deleted.
type watchLog struct {
	mu           sync.Mutex
	claimUIDs    map[string][]types.UID
	claimDeleted map[types.UID]uint64
	podDeleted   map[string]uint64
	closed       bool // a watch ended before the test stopped it
}

func (e *env) watchClaimsAndPods(ctx context.Context) *watchLog {
	e.t.Helper()
	l := &watchLog{claimUIDs: map[string][]types.UID{}, claimDeleted: map[types.UID]uint64{}, podDeleted: map[string]uint64{}}
	claims, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(claims.Stop)
	e.t.Cleanup(pods.Stop)
	follow := func(w watch.Interface, record func(watch.EventType, metav1.Object, uint64)) {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
			l.mu.Lock()
			record(ev.Type, o, rv)
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.closed = l.closed || ctx.Err() == nil
		l.mu.Unlock()
	}
	go follow(claims, func(typ watch.EventType, o metav1.Object, rv uint64) {
		if uids := l.claimUIDs[o.GetName()]; len(uids) == 0 || uids[len(uids)-1] != o.GetUID() {
			l.claimUIDs[o.GetName()] = append(uids, o.GetUID())
		}
		if typ == watch.Deleted {
			l.claimDeleted[o.GetUID()] = rv
		}
	})
	go follow(pods, func(typ watch.EventType, o metav1.Object, rv uint64) {
		if typ == watch.Deleted {
			l.podDeleted[o.GetName()] = rv
		}
	})
	return l
}

// streamedPod is a pod of the stream and when it was created.
type streamedPod struct {
	name string
	uid  types.UID
	at   time.Time
}

// podStream creates pods with a generic ephemeral volume "scratch", unscheduled (the
// ephemeral volume controller creates claims for pods whatever their node), one every
// interval until stopped.
type podStream struct {
	mu         sync.Mutex
	pods       []streamedPod
	err        error
	stopStream func()
	done       chan struct{}
}

func (e *env) streamEphemeralPods(ctx context.Context, interval time.Duration) *podStream {
	ctx, cancel := context.WithCancel(ctx)
	s := &podStream{stopStream: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("eph-%03d", i)}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			}}
			unschedulable(p)
			withEphemeral("scratch", template())(p)
			at := time.Now()
			created, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{})
			s.mu.Lock()
			if err != nil && ctx.Err() == nil {
				s.err = fmt.Errorf("creating pod %s: %w", p.Name, err)
			}
			if err == nil {
				s.pods = append(s.pods, streamedPod{name: created.Name, uid: created.UID, at: at})
			}
			s.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *podStream) created() []streamedPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]streamedPod(nil), s.pods...)
}

func (s *podStream) error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// stop ends the stream and returns the pods it created.
func (s *podStream) stop() []streamedPod {
	s.stopStream()
	<-s.done
	return s.created()
}
