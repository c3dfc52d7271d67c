package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestConservativeRemote(t *testing.T) {
	for _, fin := range []string{metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents} {
		if pending, err := (conservativeRemote{}).Pending(context.Background(), metav1.OwnerReference{Name: "n"}, fin); !pending || err != nil {
			t.Errorf("%s: pending %v, %v; conservativeRemote must always hold the finalizer", fin, pending, err)
		}
	}
}

// pagedLister serves objs per resource one object per page, records the options of
// every call, and fails the resources in fail.
type pagedLister struct {
	mu    sync.Mutex
	objs  map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata
	fail  map[schema.GroupVersionResource]error
	calls []string
}

func (l *pagedLister) list(_ context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%s limit=%d rv=%q continue=%q", gvr.Resource, opts.Limit, opts.ResourceVersion, opts.Continue))
	if err := l.fail[gvr]; err != nil {
		return nil, err
	}
	i := 0
	if opts.Continue != "" {
		i, _ = strconv.Atoi(opts.Continue)
	}
	out := &metav1.PartialObjectMetadataList{}
	objs := l.objs[gvr]
	if i < len(objs) {
		out.Items = append(out.Items, *objs[i].DeepCopy())
		if i+1 < len(objs) {
			out.Continue = strconv.Itoa(i + 1)
		}
	}
	return out, nil
}

func (l *pagedLister) add(objs ...*metav1.PartialObjectMetadata) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.objs == nil {
		l.objs = map[schema.GroupVersionResource][]*metav1.PartialObjectMetadata{}
	}
	for _, o := range objs {
		gvr := resourceOf(o).GroupVersionResource
		l.objs[gvr] = append(l.objs[gvr], o)
	}
}

func namespacedFixtureResources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{pods.GroupVersionResource, deployments.GroupVersionResource, replicaSets.GroupVersionResource}
}

// newTestSweeper is a sweeper on a fake clock that never moves, with no least gap
// between sweeps.
func newTestSweeper(t *testing.T, list listFunc) *sweeper {
	s := newSweeper(list, namespacedFixtureResources, clocktesting.NewFakeClock(time.Unix(0, 0)), controllertest.Logger(t))
	s.minGap = 0
	return s
}

func ownerRef(o *metav1.PartialObjectMetadata) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID}
}

func TestSweep(t *testing.T) {
	n := object(nodes, "", "n", "n-1")
	other := object(nodes, "", "other", "other-1")
	tests := []struct {
		name      string
		objs      []*metav1.PartialObjectMetadata
		fail      []schema.GroupVersionResource
		failWith  error // the failing lists' error (default: a timeout)
		finalizer string
		want      bool
		wantErr   bool
		// wantCalls, when set, are the lists sent.
		wantCalls []string
	}{
		{
			name:      "foreground: a blocking reference in another shard's namespace is pending",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ownedBy(n, true))},
			finalizer: metav1.FinalizerDeleteDependents,
			want:      true,
		},
		{
			name:      "foreground: a non-blocking reference does not hold the owner",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ownedBy(n, false))},
			finalizer: metav1.FinalizerDeleteDependents,
		},
		{
			name:      "foreground: a reference without blockOwnerDeletion does not hold the owner",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ref("v1", "Node", "n", "n-1"))},
			finalizer: metav1.FinalizerDeleteDependents,
		},
		{
			name:      "foreground: no reference",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ownedBy(other, true))},
			finalizer: metav1.FinalizerDeleteDependents,
		},
		{
			name:      "orphan: a non-blocking reference is pending",
			objs:      []*metav1.PartialObjectMetadata{object(replicaSets, "remote", "rs", "rs-1", ownedBy(n, false))},
			finalizer: metav1.FinalizerOrphanDependents,
			want:      true,
		},
		{
			name:      "orphan: a blocking reference is pending",
			objs:      []*metav1.PartialObjectMetadata{object(replicaSets, "remote", "rs", "rs-1", ownedBy(n, true))},
			finalizer: metav1.FinalizerOrphanDependents,
			want:      true,
		},
		{
			name:      "orphan: no reference",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1")},
			finalizer: metav1.FinalizerOrphanDependents,
		},
		{
			name: "a reference on a later page is found; every list is paginated at 500 and a consistent read",
			objs: []*metav1.PartialObjectMetadata{
				object(pods, "a", "p", "p-1"), object(pods, "b", "p", "p-2"), object(pods, "c", "p", "p-3", ownedBy(n, true)),
			},
			finalizer: metav1.FinalizerDeleteDependents,
			want:      true,
			wantCalls: []string{
				`pods limit=500 rv="" continue=""`,
				`pods limit=500 rv="" continue="1"`,
				`pods limit=500 rv="" continue="2"`,
				`deployments limit=500 rv="" continue=""`,
				`replicasets limit=500 rv="" continue=""`,
			},
		},
		{
			name:      "a resource that cannot be listed makes the answer an error, never not pending",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1")},
			fail:      []schema.GroupVersionResource{replicaSets.GroupVersionResource},
			finalizer: metav1.FinalizerDeleteDependents,
			wantErr:   true,
		},
		{
			name:      "a resource whose API is down (503) is left out, as upstream leaves out what its monitors could not sync",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1")},
			fail:      []schema.GroupVersionResource{replicaSets.GroupVersionResource},
			failWith:  apierrors.NewServiceUnavailable("metrics.k8s.io/v1beta1: the server is currently unable to handle the request"),
			finalizer: metav1.FinalizerDeleteDependents,
		},
		{
			name:      "a resource no longer served (404) is left out",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1")},
			fail:      []schema.GroupVersionResource{replicaSets.GroupVersionResource},
			failWith:  apierrors.NewNotFound(replicaSets.GroupResource(), ""),
			finalizer: metav1.FinalizerOrphanDependents,
		},
		{
			name:      "a failing list does not hide a reference found elsewhere: pending",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ownedBy(n, false))},
			fail:      []schema.GroupVersionResource{replicaSets.GroupVersionResource},
			finalizer: metav1.FinalizerOrphanDependents,
			want:      true,
		},
		{
			name:      "a failing list with only a non-blocking reference for foreground: an error",
			objs:      []*metav1.PartialObjectMetadata{object(pods, "remote", "p", "p-1", ownedBy(n, false))},
			fail:      []schema.GroupVersionResource{deployments.GroupVersionResource},
			finalizer: metav1.FinalizerDeleteDependents,
			wantErr:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &pagedLister{fail: map[schema.GroupVersionResource]error{}}
			l.add(tt.objs...)
			for _, gvr := range tt.fail {
				l.fail[gvr] = tt.failWith
				if tt.failWith == nil {
					l.fail[gvr] = apierrors.NewTimeoutError("the list took too long", 1)
				}
			}
			s := newTestSweeper(t, l.list)
			got, err := s.Pending(context.Background(), ownerRef(n), tt.finalizer)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Pending = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
			if tt.wantCalls != nil {
				equal(t, "lists", l.calls, tt.wantCalls)
			}
		})
	}
}

// blockingLister hands every list call to the test, which answers it.
type blockingLister struct {
	calls chan listCall
}

type listCall struct {
	gvr   schema.GroupVersionResource
	reply chan *metav1.PartialObjectMetadataList
}

func (l *blockingLister) list(ctx context.Context, gvr schema.GroupVersionResource, _ metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	c := listCall{gvr: gvr, reply: make(chan *metav1.PartialObjectMetadataList)}
	select {
	case l.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type answer struct {
	pending bool
	err     error
}

func TestSweepBatching(t *testing.T) {
	a, b, c := object(nodes, "", "a", "a-1"), object(nodes, "", "b", "b-1"), object(nodes, "", "c", "c-1")
	l := &blockingLister{calls: make(chan listCall)}
	s := newSweeper(l.list, func() []schema.GroupVersionResource { return []schema.GroupVersionResource{pods.GroupVersionResource} },
		clocktesting.NewFakeClock(time.Unix(0, 0)), controllertest.Logger(t))
	s.minGap = 0
	ask := func(o *metav1.PartialObjectMetadata) chan answer {
		ch := make(chan answer, 1)
		go func() {
			p, err := s.Pending(context.Background(), ownerRef(o), metav1.FinalizerDeleteDependents)
			ch <- answer{p, err}
		}()
		return ch
	}
	list := func(objs ...*metav1.PartialObjectMetadata) *metav1.PartialObjectMetadataList {
		out := &metav1.PartialObjectMetadataList{}
		for _, o := range objs {
			out.Items = append(out.Items, *o)
		}
		return out
	}
	timeout := time.After(10 * time.Second)
	nextCall := func() listCall {
		select {
		case c := <-l.calls:
			return c
		case <-timeout:
			t.Fatal("no list call")
			return listCall{}
		}
	}

	// a starts sweep 1.
	gotA := ask(a)
	first := nextCall()
	// b and c ask while sweep 1 lists: they join sweep 2.
	gotB, gotC := ask(b), ask(c)
	for {
		s.mu.Lock()
		joined := s.next != nil && len(s.next.owners) == 2
		s.mu.Unlock()
		if joined {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Sweep 1 sees a blocking reference to b; it must not answer b, which asked after
	// it started.
	first.reply <- list(object(pods, "remote", "p", "p-1", ownedBy(b, true)))
	if got := <-gotA; got.pending || got.err != nil {
		t.Errorf("a: %v; want not pending", got)
	}
	second := nextCall()
	select {
	case got := <-gotB:
		t.Fatalf("b answered %v by the sweep that started before it asked", got)
	case got := <-gotC:
		t.Fatalf("c answered %v by the sweep that started before it asked", got)
	default:
	}
	// Sweep 2, one for both: b's dependent is gone, c has one.
	second.reply <- list(object(pods, "remote", "q", "q-1", ownedBy(c, true)))
	if got := <-gotB; got.pending || got.err != nil {
		t.Errorf("b: %v; want not pending", got)
	}
	if got := <-gotC; !got.pending || got.err != nil {
		t.Errorf("c: %v; want pending", got)
	}
	// The sweeper's goroutine answers the callers before it marks its sweep done: wait
	// for that, then check that no third sweep was started.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		sweeps, running, next := s.sweeps, s.running, s.next != nil
		s.mu.Unlock()
		if !running || time.Now().After(deadline) {
			if sweeps != 2 || running || next {
				t.Errorf("%d sweeps (running %v, next %v); want 2, both done", sweeps, running, next)
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSweepCallerGivesUp(t *testing.T) {
	l := &blockingLister{calls: make(chan listCall)}
	s := newSweeper(l.list, func() []schema.GroupVersionResource { return []schema.GroupVersionResource{pods.GroupVersionResource} },
		clocktesting.NewFakeClock(time.Unix(0, 0)), controllertest.Logger(t))
	s.minGap = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Pending(ctx, metav1.OwnerReference{UID: "n-1"}, metav1.FinalizerDeleteDependents)
		done <- err
	}()
	call := <-l.calls
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Pending = %v; want the caller's cancellation", err)
	}
	// The sweep still finishes, and the next caller gets a sweep of its own.
	call.reply <- &metav1.PartialObjectMetadataList{}
	again := make(chan answer, 1)
	go func() {
		p, err := s.Pending(context.Background(), metav1.OwnerReference{UID: "n-1"}, metav1.FinalizerDeleteDependents)
		again <- answer{p, err}
	}()
	call = <-l.calls
	call.reply <- &metav1.PartialObjectMetadataList{}
	if got := <-again; got.pending || got.err != nil {
		t.Errorf("after a caller gave up: %v; want not pending", got)
	}
}

func TestRemoteBackoff(t *testing.T) {
	b := newRemoteBackoff()
	var got []time.Duration
	for range 7 {
		got = append(got, b.When("n-1"))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits %v; want %v", got, want)
	}
	if d := b.When("other"); d != time.Second {
		t.Errorf("another owner waits %v; want its own backoff from 1s", d)
	}
	b.Forget("n-1")
	if d := b.When("n-1"); d != time.Second {
		t.Errorf("after Forget: %v; want 1s", d)
	}
}

func TestRemoteNamespacedResources(t *testing.T) {
	f := newFixture(t, nil)
	got := f.ctrl.resources.namespacedResources()
	want := namespacedFixtureResources()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("swept %v; want the namespaced served resources %v", got, want)
	}
}

// TestSweepGap: a sweep starts no earlier than max(2 s, 2 × the last sweep's duration)
// after the last one started; a caller meanwhile waits for it.
func TestSweepGap(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	var mu sync.Mutex
	calls := 0
	list := func(context.Context, schema.GroupVersionResource, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			clk.Step(3 * time.Second) // the first sweep lasts 3 s: the gap is 6 s
		}
		return &metav1.PartialObjectMetadataList{}, nil
	}
	called := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	s := newSweeper(list, func() []schema.GroupVersionResource { return []schema.GroupVersionResource{pods.GroupVersionResource} },
		clk, controllertest.Logger(t))
	owner := metav1.OwnerReference{UID: "n-1"}
	if p, err := s.Pending(context.Background(), owner, metav1.FinalizerDeleteDependents); p || err != nil {
		t.Fatalf("first sweep: %v, %v", p, err)
	}
	got := make(chan answer, 1)
	go func() {
		p, err := s.Pending(context.Background(), owner, metav1.FinalizerDeleteDependents)
		got <- answer{p, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !clk.HasWaiters() {
		if called() > 1 {
			t.Fatal("the second sweep started right after the first")
		}
		if time.Now().After(deadline) {
			t.Fatal("the second sweep does not wait")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(2 * time.Second) // 5 s after the first start
	time.Sleep(20 * time.Millisecond)
	if n := called(); n != 1 {
		t.Fatalf("%d lists 5 s after a 3 s sweep started; want the second to wait for 6 s", n)
	}
	clk.Step(time.Second)
	select {
	case a := <-got:
		if a.pending || a.err != nil {
			t.Errorf("second sweep: %v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second sweep did not start 6 s after the first")
	}
	if n := called(); n != 2 {
		t.Errorf("%d lists; want 2", n)
	}
}

// TestSweepRestartsOnExpiredContinue: a 410 on a continue token restarts that resource's
// list from the beginning, once; a second one fails the sweep.
func TestSweepRestartsOnExpiredContinue(t *testing.T) {
	n := object(nodes, "", "n", "n-1")
	for _, tt := range []struct {
		name        string
		expire      int
		wantPending bool
		wantErr     bool
	}{
		{name: "once: listed again", expire: 1, wantPending: true},
		{name: "twice: an error", expire: 2, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &pagedLister{}
			l.add(object(pods, "a", "p0", "p0-1"), object(pods, "b", "p1", "p1-1"), object(pods, "c", "p2", "p2-1", ownedBy(n, true)))
			expired := 0
			list := func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
				if opts.Continue == "2" && expired < tt.expire {
					expired++
					return nil, apierrors.NewResourceExpired("the provided continue parameter is too old")
				}
				return l.list(ctx, gvr, opts)
			}
			s := newTestSweeper(t, list)
			p, err := s.Pending(context.Background(), ownerRef(n), metav1.FinalizerDeleteDependents)
			if p != tt.wantPending || (err != nil) != tt.wantErr {
				t.Errorf("Pending = %v, %v; want %v, error %v (lists %q)", p, err, tt.wantPending, tt.wantErr, l.calls)
			}
		})
	}
}

// TestSweepTimeoutPerResource: the timeout bounds each resource's list, not the sweep: a
// resource that times out does not cut the next one short.
func TestSweepTimeoutPerResource(t *testing.T) {
	n := object(nodes, "", "n", "n-1")
	list := func(ctx context.Context, gvr schema.GroupVersionResource, _ metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		if gvr == pods.GroupVersionResource {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out := &metav1.PartialObjectMetadataList{}
		if gvr == replicaSets.GroupVersionResource {
			out.Items = append(out.Items, *object(replicaSets, "r", "rs", "rs-1", ownedBy(n, true)))
		}
		return out, nil
	}
	s := newSweeper(list, func() []schema.GroupVersionResource {
		return []schema.GroupVersionResource{pods.GroupVersionResource, replicaSets.GroupVersionResource}
	}, clocktesting.NewFakeClock(time.Unix(0, 0)), controllertest.Logger(t))
	s.resourceTimeout = 500 * time.Millisecond
	p, err := s.Pending(context.Background(), ownerRef(n), metav1.FinalizerDeleteDependents)
	if !p || err != nil {
		t.Errorf("Pending = %v, %v; want pending: the replicaset listed after the pods' timeout references the owner", p, err)
	}
}

// TestSweepNotReady: the controller's sweep answers an error until the shard's first
// discovery round is complete (its first Resync) and a namespaced resource is known.
func TestSweepNotReady(t *testing.T) {
	owner := metav1.OwnerReference{UID: "n-1"}
	t.Run("no namespaced resource known", func(t *testing.T) {
		s := newTestSweeper(t, (&pagedLister{}).list)
		s.resources = func() []schema.GroupVersionResource { return nil }
		if p, err := s.Pending(context.Background(), owner, metav1.FinalizerDeleteDependents); err == nil {
			t.Errorf("Pending = %v, nil; want an error", p)
		}
	})
	t.Run("before the first Resync", func(t *testing.T) {
		f := newShard(t, nil)
		f.ctrl.resynced.Store(false)
		if p, err := f.ctrl.remote.Pending(context.Background(), owner, metav1.FinalizerDeleteDependents); err == nil {
			t.Errorf("Pending = %v, nil before Resync; want an error", p)
		}
		f.ctrl.Resync(controllers.Scope{Cluster: true})
		f.drainGraph()
		if p, err := f.ctrl.remote.Pending(context.Background(), owner, metav1.FinalizerDeleteDependents); p || err != nil {
			t.Errorf("Pending = %v, %v after Resync; want not pending", p, err)
		}
	})
}
