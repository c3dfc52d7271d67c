package invariant

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// step is one thing that happens to the checker of Service ns/svc.
type step struct {
	slice  string          // a slice event: its name
	delete bool            // the slice's delete event
	pods   map[string]bool // the slice's pods and readiness
	begin  []string        // Begin on these pods ("*": every pod)
	expect map[string]bool // Expect this union
}

func slice(name string, pods map[string]bool) step { return step{slice: name, pods: pods} }

func es(name string, rv int, pods map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv),
		Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for p, r := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: &r}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: p}})
	}
	return s
}

func run(steps []step) *Checker {
	now := time.Unix(1000, 0)
	c := New(func() time.Time { return now })
	c.AddService("ns", "svc")
	for i, s := range steps {
		now = now.Add(time.Second)
		switch {
		case s.begin != nil:
			pods := s.begin
			if len(pods) == 1 && pods[0] == "*" {
				pods = nil
			}
			c.Begin("ns", []string{"svc"}, pods)
		case s.expect != nil:
			c.Expect("ns", "svc", s.expect)
		case s.delete:
			c.Observe(es(s.slice, i, nil), "delete")
		default:
			event := "update"
			if i == 0 {
				event = "add"
			}
			c.Observe(es(s.slice, i, s.pods), event)
		}
	}
	return c
}

func TestChecker(t *testing.T) {
	ab := map[string]bool{"a": true, "b": true}
	tests := []struct {
		name       string
		steps      []step
		violations map[Kind]int
		first      string // a part of the first violation's text
		reflected  int
		dups       int
	}{
		{
			name:      "ready pods stay: nothing",
			steps:     []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), slice("s1", ab)},
			reflected: 1,
		},
		{
			name:       "a stably ready pod shown not ready without an intent",
			steps:      []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), slice("s1", map[string]bool{"a": true, "b": false})},
			violations: map[Kind]int{Open: 1}, first: "pod b (shown not ready", reflected: 1,
		},
		{
			name: "a stably ready pod dropped without an intent and back in the same slice: lost",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), slice("s1", map[string]bool{"a": true}),
				slice("s1", ab)},
			violations: map[Kind]int{Lost: 1}, first: "lost: Service ns/svc lost ready pod b (missing", reflected: 1,
		},
		{
			name: "an endpoint moving between two slices in two writes: moved",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), slice("s1", map[string]bool{"a": true}),
				slice("s2", map[string]bool{"b": true})},
			violations: map[Kind]int{Moved: 1}, first: "back ready in slice s2", reflected: 1,
		},
		{
			name:       "a slice deleted under a stably ready pod",
			steps:      []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), {slice: "s1", delete: true}},
			violations: map[Kind]int{Open: 2}, first: "at delete event", reflected: 1,
		},
		{
			name: "the test's flip of b: b may go, a may not",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), {begin: []string{"b"}},
				{expect: map[string]bool{"a": true, "b": false}}, slice("s1", map[string]bool{"a": true, "b": false})},
			reflected: 2,
		},
		{
			name: "an intent on b does not excuse a",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), {begin: []string{"b"}},
				slice("s1", map[string]bool{"a": false, "b": false})},
			violations: map[Kind]int{Open: 1}, first: "pod a", reflected: 1,
		},
		{
			name: "no pod stably ready while an intent is outstanding: a stale slice then the new state",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), {begin: []string{"b"}},
				{expect: map[string]bool{"a": true, "b": false}}, slice("s1", ab),
				slice("s1", map[string]bool{"a": true, "b": false}), slice("s1", map[string]bool{"a": true, "b": true})},
			violations: map[Kind]int{}, reflected: 2,
		},
		{
			name: "after the intent is shown, the pod is stably ready again",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), {begin: []string{"b"}},
				{expect: map[string]bool{"a": true, "b": false}}, slice("s1", map[string]bool{"a": true, "b": false}),
				{begin: []string{"b"}}, {expect: ab}, slice("s1", ab), slice("s1", map[string]bool{"a": true})},
			violations: map[Kind]int{Open: 1}, first: "pod b", reflected: 3,
		},
		{
			name: "a pod in two slices at once",
			steps: []step{{begin: []string{"*"}}, {expect: ab}, slice("s1", ab), slice("s2", map[string]bool{"b": true}),
				slice("s2", map[string]bool{})},
			reflected: 1, dups: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := run(tc.steps)
			r := c.Report()
			want := tc.violations
			if want == nil {
				want = map[Kind]int{}
			}
			for _, k := range []Kind{Lost, Moved, Open} {
				if r.Violations[k] != want[k] {
					t.Errorf("%s violations: %d, want %d (%v)", k, r.Violations[k], want[k], c.Violations())
				}
			}
			if tc.first != "" {
				if vs := c.Violations(); len(vs) == 0 || !strings.Contains(vs[0].String(), tc.first) {
					t.Errorf("first violation %v, want it to say %q", vs, tc.first)
				}
			}
			if r.Reflected != tc.reflected {
				t.Errorf("intents reflected: %d, want %d", r.Reflected, tc.reflected)
			}
			if r.DuplicateEpisodes != tc.dups {
				t.Errorf("duplicate episodes: %d, want %d", r.DuplicateEpisodes, tc.dups)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name      string
		got, want map[string]bool
		diff      string
	}{
		{name: "equal", got: map[string]bool{"a": true}, want: map[string]bool{"a": true}},
		{name: "all kinds", got: map[string]bool{"a": false, "c": true}, want: map[string]bool{"a": true, "b": true},
			diff: "a ready=false want true, b missing, c extra"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := Diff(tc.got, tc.want); d != tc.diff {
				t.Errorf("Diff = %q, want %q", d, tc.diff)
			}
		})
	}
}
