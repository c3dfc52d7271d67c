package daemonset

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kshard/kshard/test/framework"
)

// binderName is the scheduler the handoff test's pods name: none runs, the test binds
// them itself, so it decides when a new pod can become available.
const binderName = "kshard-e2e-binder"

// TestRollingUpdateAcrossShardKill: a DaemonSet's rolling update (8 nodes, maxSurge 2)
// is half done when the shard that owns its namespace is SIGKILLed (a spare joined
// first); the shard the coordinator gives the namespace to once the dead one's session
// has lapsed finishes it. The pods name a scheduler that does not run, and the test binds
// them itself: old pods at once, new ones only as many as it allows, so the rollout stops
// where the test wants it. Before the kill 4 nodes are updated and 2 run an old pod beside
// a new one the test has not bound; while no shard works the namespace those 2 are bound
// and become available; the new owner must delete their old pods and roll the last 2
// nodes. Checked from a pod watch: no node ever runs two pods of the new template, 8 new
// pods created over the whole rollout (none twice, none replaced), every old pod gone; from
// the controller's events: no pod deleted twice (one SuccessfulDelete at most per pod, and
// exactly one for each old pod deleted after the kill, which the new owner deletes).
// Not parallel: it kills one of the package's shards.
func TestRollingUpdateAcrossShardKill(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the daemonset controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const nodes = 8
	e.nodes(nodeSpec{prefix: "n", count: nodes})
	b := e.startBinder(ctx, "roll")
	e.daemonSet("roll", nil, rolling(intstr.FromInt32(2), intstr.FromInt32(0)), func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.SchedulerName = binderName
	})
	e.waitStatus("roll", all(nodes))
	owner := k.StableOwner(t, e.ns)
	w := e.watchRevisions(ctx, "roll")

	b.allow(4)
	e.setImage("roll", image2)
	framework.Eventually(t, settle, "4 nodes updated, 2 surging with a new pod not bound", func(context.Context) (bool, error) {
		if old, updated, unbound := w.live(); old != 4 || updated != 6 || unbound != 2 {
			return false, fmt.Errorf("live: %d old, %d new (%d not bound)", old, updated, unbound)
		}
		return true, nil
	})
	killed := time.Now()
	owner.Kill()
	b.allow(2)
	framework.Eventually(t, settle, "the 2 surging nodes' new pods bound and Ready", func(context.Context) (bool, error) {
		_, _, unbound := w.live()
		return unbound == 0 && w.readyNew() == 6, nil
	})
	readyAt := time.Now()
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	k.WaitAllOwned(t, 90*time.Second)
	t.Logf("namespace %s moved %s → %s, seen %s after SIGKILL; the 2 surging nodes' new pods Ready %s after SIGKILL",
		e.ns, owner.Name, to.Name, seen.Sub(killed).Round(time.Millisecond), readyAt.Sub(killed).Round(time.Millisecond))
	b.allow(nodes)
	e.waitStatus("roll", all(nodes))
	if err := b.error(); err != nil {
		t.Errorf("binder: %v", err)
	}

	byNode := e.pods("roll")
	for i := range nodes {
		n := e.nodeName("n", i)
		if p := byNode[n]; len(p) != 1 || p[0].Spec.Containers[0].Image != image2 {
			t.Errorf("node %s runs %d pods (%v), want one of the new template", n, len(p), p)
		}
	}
	// The pod watch and the controller's events catch up with the status, each with its
	// own delay: every old pod seen gone, and each one the new owner deleted with its event.
	var deletes map[string]int32
	framework.Eventually(t, settle, "the pod watch and the SuccessfulDelete events caught up", func(context.Context) (bool, error) {
		if old, fresh, unbound := w.live(); old != 0 || fresh != nodes || unbound != 0 {
			return false, fmt.Errorf("watch: %d old and %d new pods live (%d not bound)", old, fresh, unbound)
		}
		var err error
		if deletes, err = e.eventsOf("roll", "SuccessfulDelete"); err != nil {
			return false, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.oldDeleted) != nodes {
			return false, fmt.Errorf("watch: %d old pods gone", len(w.oldDeleted))
		}
		for name, gone := range w.oldDeleted {
			if gone.After(killed) && deletes["Deleted pod: "+name] == 0 {
				return false, fmt.Errorf("no SuccessfulDelete event for %s, deleted after the kill", name)
			}
		}
		return true, nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxNewOnNode != 1 {
		t.Errorf("at most %d pods of the new template on a node at once, want 1", w.maxNewOnNode)
	}
	newPods := map[string][]types.UID{}
	for uid, n := range w.newNode {
		newPods[n] = append(newPods[n], uid)
	}
	if len(w.newNode) != nodes || len(newPods) != nodes {
		t.Errorf("%d pods of the new template created over %d nodes (%v), want one on each of the %d", len(w.newNode), len(newPods), newPods, nodes)
	}
	var afterKill int
	for name, gone := range w.oldDeleted {
		n := deletes["Deleted pod: "+name]
		if gone.After(killed) {
			afterKill++
			if n != 1 {
				t.Errorf("old pod %s deleted after the kill: %d SuccessfulDelete events, want 1 (from the new owner)", name, n)
			}
		} else if n > 1 {
			t.Errorf("old pod %s: %d SuccessfulDelete events, want at most 1", name, n)
		}
	}
	for msg, n := range deletes {
		if _, ok := w.oldDeleted[strings.TrimPrefix(msg, "Deleted pod: ")]; !ok || n > 1 {
			t.Errorf("SuccessfulDelete %q x%d: want one per old pod, none of a new one", msg, n)
		}
	}
	t.Logf("old pods deleted after the kill: %d of %d; SuccessfulDelete events %d", afterKill, nodes, len(deletes))
	if afterKill != 4 {
		t.Errorf("%d old pods deleted after the kill, want 4 (the kill came after 4 nodes were updated)", afterKill)
	}
}

// binder binds the pods of one DaemonSet that name binderName to the node they are
// pinned to: pods of the first image at once, of image2 only as many as allowed.
type binder struct {
	mu      sync.Mutex
	allowed int
	bound   map[types.UID]bool
	err     error
}

func (b *binder) allow(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allowed += n
}

func (b *binder) error() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (e *env) startBinder(ctx context.Context, app string) *binder {
	b := &binder{bound: map[types.UID]bool{}}
	go func() {
		for ctx.Err() == nil {
			l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err == nil {
				sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
				for _, p := range l.Items {
					b.bind(ctx, e, &p)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return b
}

func (b *binder) bind(ctx context.Context, e *env, p *corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || b.bound[p.UID] {
		return
	}
	fresh := p.Spec.Containers[0].Image == image2
	if fresh && b.allowed == 0 {
		return
	}
	err := e.cs.CoreV1().Pods(e.ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: pinnedNode(p)}}, metav1.CreateOptions{})
	switch {
	case err == nil:
		b.bound[p.UID] = true
		if fresh {
			b.allowed--
		}
	case apierrors.IsNotFound(err) || ctx.Err() != nil:
	default:
		b.err = fmt.Errorf("binding %s: %w", p.Name, err)
	}
}

// pinnedNode is the node a daemon pod's required node affinity names.
func pinnedNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// revisionWatch follows a DaemonSet's pods: the pods of image2 ever created and their
// nodes, the most pods of image2 live on one node at once, and when each old pod went.
type revisionWatch struct {
	mu           sync.Mutex
	pods         map[types.UID]*corev1.Pod // live, not being deleted
	newNode      map[types.UID]string      // every pod of image2 seen
	maxNewOnNode int
	oldDeleted   map[string]time.Time // old pods by name, when seen deleted
}

func (e *env) watchRevisions(ctx context.Context, app string) *revisionWatch {
	e.t.Helper()
	w := &revisionWatch{pods: map[types.UID]*corev1.Pod{}, newNode: map[types.UID]string{}, oldDeleted: map[string]time.Time{}}
	wi, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			fresh := p.Spec.Containers[0].Image == image2
			w.mu.Lock()
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				delete(w.pods, p.UID)
				if _, seen := w.oldDeleted[p.Name]; !fresh && !seen {
					w.oldDeleted[p.Name] = time.Now()
				}
			} else {
				w.pods[p.UID] = p
				if fresh {
					w.newNode[p.UID] = pinnedNode(p)
				}
			}
			perNode := map[string]int{}
			for _, q := range w.pods {
				if q.Spec.Containers[0].Image == image2 {
					perNode[pinnedNode(q)]++
				}
			}
			for _, n := range perNode {
				w.maxNewOnNode = max(w.maxNewOnNode, n)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// live counts the live pods: of the old image, of image2, and of image2 not bound.
func (w *revisionWatch) live() (old, fresh, unbound int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pods {
		if p.Spec.Containers[0].Image != image2 {
			old++
			continue
		}
		fresh++
		if p.Spec.NodeName == "" {
			unbound++
		}
	}
	return old, fresh, unbound
}

// readyNew counts the live pods of image2 that are Ready.
func (w *revisionWatch) readyNew() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.pods {
		if p.Spec.Containers[0].Image != image2 {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// eventsOf counts the DaemonSet controller's events of reason on the DaemonSet, by message.
func (e *env) eventsOf(ds, reason string) (map[string]int32, error) {
	l, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + ds})
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, ev := range l.Items {
		if ev.InvolvedObject.Kind == "DaemonSet" && ev.Reason == reason {
			out[ev.Message] += max(ev.Count, 1)
		}
	}
	return out, nil
}
