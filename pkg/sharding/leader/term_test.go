package leader

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const (
	testNamespace = "kube-system"
	testLease     = "kshard-coordinator"
)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// termLease is a term record holding annotation value v ("" for none).
func termLease(v string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: TermLeaseName(testLease), ResourceVersion: "1"}}
	if v != "" {
		l.Annotations = map[string]string{TermAnnotation: v}
	}
	return l
}

func testStore(c *fake.Clientset) TermStore {
	return TermStore{Leases: c.CoordinationV1(), Namespace: testNamespace, Name: TermLeaseName(testLease)}
}

func recorded(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	l, err := c.CoordinationV1().Leases(testNamespace).Get(context.Background(), TermLeaseName(testLease), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the term record: %v", err)
	}
	return l.Annotations[TermAnnotation]
}

func TestTermStoreAdvance(t *testing.T) {
	tests := []struct {
		name     string
		existing *coordinationv1.Lease // nil: no term record yet
		atLeast  uint64
		// react installs reactors; updates counts the Update calls made so far.
		react   func(c *fake.Clientset, updates *int)
		want    uint64
		wantErr string
	}{
		{name: "first leader ever: the Lease's count", atLeast: 5, want: 5},
		{name: "zero is no term", atLeast: 0, want: 1},
		{name: "recorded term above the Lease's count", existing: termLease("7"), atLeast: 2, want: 8},
		{name: "Lease's count above the recorded term", existing: termLease("3"), atLeast: 9, want: 9},
		{name: "record without the annotation", existing: termLease(""), atLeast: 4, want: 4},
		{name: "malformed record: refuse rather than guess", existing: termLease("seven"), atLeast: 2, wantErr: `is not a term`},
		{name: "no term left in 32 bits", existing: termLease(strconv.FormatUint(math.MaxUint32, 10)), atLeast: 2, wantErr: "terms exhausted"},
		{name: "last term that fits", existing: termLease(strconv.FormatUint(math.MaxUint32-1, 10)), atLeast: 2, want: math.MaxUint32},
		{
			name:     "conflict: somebody recorded a higher term in between; retried above it",
			existing: termLease("4"), atLeast: 2, want: 10,
			react: func(c *fake.Clientset, updates *int) {
				c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if *updates++; *updates > 1 {
						return false, nil, nil
					}
					// The other writer's update lands first.
					other := termLease("9")
					other.ResourceVersion = "2"
					if err := c.Tracker().Update(schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, other, testNamespace); err != nil {
						return true, nil, err
					}
					return true, nil, apierrors.NewConflict(leasesResource, TermLeaseName(testLease), nil)
				})
			},
		},
		{
			name: "created by somebody else in between: retried as an update", atLeast: 3, want: 7,
			react: func(c *fake.Clientset, _ *int) {
				created := false
				c.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if created {
						return false, nil, nil
					}
					created = true
					if err := c.Tracker().Add(termLease("6")); err != nil {
						return true, nil, err
					}
					return true, nil, apierrors.NewAlreadyExists(leasesResource, TermLeaseName(testLease))
				})
			},
		},
		{
			name: "forbidden: not retried, not leading", existing: termLease("4"), atLeast: 2, wantErr: "forbidden",
			react: func(c *fake.Clientset, updates *int) {
				c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					*updates++
					return true, nil, apierrors.NewForbidden(leasesResource, TermLeaseName(testLease), nil)
				})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			if tt.existing != nil {
				if err := c.Tracker().Add(tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			updates := 0
			if tt.react != nil {
				tt.react(c, &updates)
			}
			got, err := testStore(c).Advance(context.Background(), tt.atLeast)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Advance = %d, %v; want an error containing %q", got, err, tt.wantErr)
				}
				if strings.Contains(tt.wantErr, "forbidden") && updates != 1 {
					t.Errorf("%d updates; a refused write must not be retried", updates)
				}
				return
			}
			if err != nil {
				t.Fatalf("Advance: %v", err)
			}
			if got != tt.want {
				t.Errorf("Advance = %d, want %d", got, tt.want)
			}
			if r := recorded(t, c); r != strconv.FormatUint(tt.want, 10) {
				t.Errorf("recorded term %q, want %d", r, tt.want)
			}
		})
	}
}

func TestTermStoreRead(t *testing.T) {
	tests := []struct {
		name     string
		existing *coordinationv1.Lease
		want     uint64
		wantErr  bool
	}{
		{name: "no record", want: 0},
		{name: "record", existing: termLease("12"), want: 12},
		{name: "record without annotation", existing: termLease(""), want: 0},
		{name: "malformed", existing: termLease("-1"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			if tt.existing != nil {
				if err := c.Tracker().Add(tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			got, err := testStore(c).Read(context.Background())
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Read = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// lead runs one leadership of identity through Run against c and returns its term: the
// leader ends its leadership (and so releases the Lease) as soon as it leads.
func lead(t *testing.T, c *fake.Clientset, identity string) uint64 {
	t.Helper()
	o := &Options{Enabled: true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		ResourceName: testLease, ResourceNamespace: testNamespace}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var term uint64
	err := Run(ctx, o, c, identity, Callbacks{OnLeading: func(_ context.Context, tm uint64, _ *Tenure) {
		term = tm
		cancel()
	}})
	if err != nil {
		t.Fatalf("Run(%s): %v", identity, err)
	}
	if term == 0 {
		t.Fatalf("%s never led", identity)
	}
	return term
}

// TestTermSurvivesLeaseDeletion: deleting the election Lease starts its transition count
// over, yet the next leader's term is still above every term before (it used to be 1
// again, below the epochs shards hold, and the leader stepped down in a loop).
func TestTermSurvivesLeaseDeletion(t *testing.T) {
	c := fake.NewClientset()
	t1 := lead(t, c, "coordinator-a")
	t2 := lead(t, c, "coordinator-b")
	if t2 <= t1 {
		t.Fatalf("second leader's term %d is not above the first's %d", t2, t1)
	}
	if err := c.CoordinationV1().Leases(testNamespace).Delete(context.Background(), testLease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t3 := lead(t, c, "coordinator-c")
	if t3 <= t2 {
		t.Fatalf("after the Lease was deleted the new leader got term %d, not above the previous %d", t3, t2)
	}
	if r := recorded(t, c); r != strconv.FormatUint(t3, 10) {
		t.Errorf("recorded term %s, want %d", r, t3)
	}
}

// TestRunDoesNotLeadWithoutTerm: a leader that cannot record its term gives the Lease up
// and returns the reason instead of leading with a term that may go backwards.
func TestRunDoesNotLeadWithoutTerm(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).Name == TermLeaseName(testLease) {
			return true, nil, apierrors.NewForbidden(leasesResource, TermLeaseName(testLease), nil)
		}
		return false, nil, nil
	})
	o := &Options{Enabled: true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		ResourceName: testLease, ResourceNamespace: testNamespace}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := false
	err := Run(ctx, o, c, "coordinator-a", Callbacks{
		OnLeading: func(context.Context, uint64, *Tenure) { t.Error("led without a recorded term") },
		OnStopped: func() { stopped = true },
	})
	if err == nil || !strings.Contains(err.Error(), "not leading") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Run = %v, want a 'not leading' error naming the refused write", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when its context ended")
	}
	if !stopped {
		t.Error("OnStopped was not called")
	}
	l, err := c.CoordinationV1().Leases(testNamespace).Get(context.Background(), testLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("the Lease is still held by %q; it must be given up for another replica", h)
	}
}

func TestClockTerm(t *testing.T) {
	tests := []struct {
		name     string
		now      time.Time
		want     uint64
		wantWait time.Duration
	}{
		{name: "mid-second", now: time.Unix(1000, 250e6), want: 1001, wantWait: 750 * time.Millisecond},
		{name: "on a whole second: the next one", now: time.Unix(1000, 0), want: 1001, wantWait: time.Second},
		{name: "just before a second", now: time.Unix(1000, 999999999), want: 1001, wantWait: time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			term, wait := clockTerm(tt.now)
			if term != tt.want || wait != tt.wantWait {
				t.Fatalf("clockTerm(%v) = %d, %v; want %d, %v", tt.now, term, wait, tt.want, tt.wantWait)
			}
		})
	}
}

// TestPlausibleTerm: a term is plausible up to a week past the current Unix time (clock
// terms are Unix seconds); above, no coordinator can have led it.
func TestPlausibleTerm(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name string
		term uint64
		want bool
	}{
		{name: "small", term: 3, want: true},
		{name: "clock term now", term: 1_800_000_000, want: true},
		{name: "within the week ahead", term: 1_800_000_000 + 6*24*3600, want: true},
		{name: "past the week ahead", term: 1_800_000_000 + 8*24*3600, want: false},
		{name: "top of 32 bits", term: math.MaxUint32, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlausibleTerm(tt.term, now); got != tt.want {
				t.Fatalf("PlausibleTerm(%d) = %v, want %v", tt.term, got, tt.want)
			}
		})
	}
}

// TestTermAbove: with leader election the term above a seen one is recorded (so the next
// leader is above it too), and is above what was recorded; without, it is the clock term
// or seen+1, whichever is higher.
func TestTermAbove(t *testing.T) {
	tests := []struct {
		name     string
		enabled  bool
		recorded string
		seen     uint64
		want     func(uint64) bool
		wantRec  string
	}{
		{name: "above seen", enabled: true, recorded: "4", seen: 900, want: func(t uint64) bool { return t == 901 }, wantRec: "901"},
		{name: "above the record", enabled: true, recorded: "950", seen: 900, want: func(t uint64) bool { return t == 951 }, wantRec: "951"},
		{name: "record missing", enabled: true, seen: 900, want: func(t uint64) bool { return t == 901 }, wantRec: "901"},
		{name: "no election, clock above", seen: 900, want: func(t uint64) bool { return t > 1_700_000_000 }},
		{name: "no election, seen above the clock", seen: 4_000_000_000, want: func(t uint64) bool { return t == 4_000_000_001 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.recorded != "" {
				objs = append(objs, termLease(tt.recorded))
			}
			c := fake.NewClientset(objs...)
			o := &Options{Enabled: tt.enabled, ResourceName: testLease, ResourceNamespace: testNamespace}
			got, err := o.TermAbove(context.Background(), c, tt.seen)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(got) {
				t.Fatalf("TermAbove(%d) = %d", tt.seen, got)
			}
			if tt.wantRec == "" {
				return
			}
			rec, err := testStore(c).Read(context.Background())
			if err != nil || strconv.FormatUint(rec, 10) != tt.wantRec {
				t.Fatalf("recorded %d (%v), want %s", rec, err, tt.wantRec)
			}
		})
	}
}
