package invariant

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Kind says what became of a violation's pod.
type Kind string

const (
	// Lost: the pod was not back, ready, in another slice of the Service by the next
	// event that showed it (it came back in the same slice, or never).
	Lost Kind = "lost"
	// Moved: the pod came back ready in another slice of the Service (an endpoint moved
	// between two slices in two writes).
	Moved Kind = "moved"
	// Open: the pod was still missing or not ready when the report was made.
	Open Kind = "open"
)

// Violation is a slice event after which a Service's slices lacked a stably ready pod or
// showed it not ready.
type Violation struct {
	Service, Pod string // namespace/name; pod name
	Slice, RV    string // the slice whose event it was, and its resourceVersion
	Event        string // add, update, delete
	At           time.Time
	NotReady     bool          // shown not ready (else missing)
	StableFor    time.Duration // how long the pod had been stably ready
	Kind         Kind
	BackIn       string        // the slice that showed it ready again
	Gap          time.Duration // until it was back
}

func (v Violation) String() string {
	what := "missing from its slices"
	if v.NotReady {
		what = "shown not ready"
	}
	s := fmt.Sprintf("%s: Service %s lost ready pod %s (%s, stably ready for %s) at %s event of slice %s rv %s at %s",
		v.Kind, v.Service, v.Pod, what, v.StableFor.Round(time.Millisecond), v.Event, v.Slice, v.RV, v.At.Format("15:04:05.000"))
	if v.Kind != Open {
		s += fmt.Sprintf("; back ready in slice %s after %s", v.BackIn, v.Gap.Round(time.Millisecond))
	}
	return s
}

// endpoint is what one slice shows of a pod.
type endpoint struct{ ready bool }

type sliceView struct {
	addressType discoveryv1.AddressType
	pods        map[string]endpoint
}

type service struct {
	slices map[string]*sliceView // by slice name
	stable map[string]time.Time  // pod -> stably ready since
	open   map[string]int        // pod -> index in Checker.violations of its open episode
	// outstanding is true from Begin until the slices show the intent (want).
	outstanding bool
	want        map[string]bool // nil until Expect
	begun       time.Time
	dupNow      bool
}

// Report sums up what the checker saw.
type Report struct {
	SliceEvents int
	// Intents recorded, and reflected in the slices; the latencies from Begin to the
	// slice event that showed it.
	Intents, Reflected        int
	ReflectP50, ReflectP99    time.Duration
	ReflectMax                time.Duration
	ReflectMaxOf              string
	StableChecks              int // stably ready pods checked at slice events
	Violations                map[Kind]int
	DuplicateEpisodes         int // a pod in two slices of one Service and address type
	DuplicateOf               string
	UnknownServiceSliceEvents int
}

// Checker is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	now        func() time.Time
	services   map[string]*service // namespace/name
	violations []Violation
	latencies  []time.Duration
	rep        Report
}

// New returns a checker; now is its clock (time.Now when nil).
func New(now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{now: now, services: map[string]*service{}, rep: Report{Violations: map[Kind]int{}}}
}

// AddService makes the checker follow a Service's slices. Call it before the Service's
// first slice can exist, then Begin and Expect its first state.
func (c *Checker) AddService(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.services[ns+"/"+name] = &service{slices: map[string]*sliceView{}, stable: map[string]time.Time{}, open: map[string]int{}}
}

// Begin records, before the test sends a request, that it can change the endpoints of
// the Services svcs in namespace ns: pods (or, nil, every pod of those Services) stop
// being stably ready for them, and no pod becomes stably ready for them until Expect's
// state is shown.
func (c *Checker) Begin(ns string, svcs []string, pods []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range svcs {
		s := c.services[ns+"/"+name]
		if s == nil {
			panic("invariant: Begin on unknown Service " + ns + "/" + name)
		}
		if pods == nil {
			clear(s.stable)
		}
		for _, p := range pods {
			delete(s.stable, p)
		}
		s.outstanding, s.want, s.begun = true, nil, c.now()
		c.rep.Intents++
	}
}

// Expect gives the state a Service's slices are to show once they show the intent begun
// last: every pod of the Service and its readiness. The Service stays outstanding until
// a slice event (or this call) shows exactly that union.
func (c *Checker) Expect(ns, name string, want map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.services[ns+"/"+name]
	s.want = maps.Clone(want)
	c.evaluate(ns+"/"+name, s, "", "", "expect")
}

// Outstanding reports whether a Service's last intent is still to be shown by its slices,
// and since when.
func (c *Checker) Outstanding(ns, name string) (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.services[ns+"/"+name]
	return s.outstanding, s.begun
}

// Union returns the pods a Service's slices show and their readiness, and the pods shown
// by more than one slice of one address type.
func (c *Checker) Union(ns, name string) (map[string]bool, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, dups := union(c.services[ns+"/"+name])
	return u, dups
}

func union(s *service) (map[string]bool, []string) {
	u := map[string]bool{}
	seen := map[string]bool{}
	var dups []string
	names := make([]string, 0, len(s.slices))
	for n := range s.slices {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := s.slices[n]
		for p, ep := range v.pods {
			k := string(v.addressType) + "/" + p
			if seen[k] {
				dups = append(dups, p)
			}
			seen[k] = true
			u[p] = u[p] || ep.ready
		}
	}
	sort.Strings(dups)
	return u, dups
}

// Handlers returns the handlers for an EndpointSlice informer (managed slices).
func (c *Checker) Handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.slice(obj, "add") },
		UpdateFunc: func(_, obj any) { c.slice(obj, "update") },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			c.slice(obj, "delete")
		},
	}
}

func (c *Checker) slice(obj any, event string) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	c.Observe(es, event)
}

// Observe applies one slice event (add, update, delete) and checks the Service's
// stably ready pods against the union it leaves.
func (c *Checker) Observe(es *discoveryv1.EndpointSlice, event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
	s := c.services[key]
	if s == nil {
		c.rep.UnknownServiceSliceEvents++
		return
	}
	c.rep.SliceEvents++
	if event == "delete" {
		delete(s.slices, es.Name)
	} else {
		v := &sliceView{addressType: es.AddressType, pods: map[string]endpoint{}}
		for _, ep := range es.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			v.pods[ep.TargetRef.Name] = endpoint{ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready}
		}
		s.slices[es.Name] = v
	}
	c.evaluate(key, s, es.Name, es.ResourceVersion, event)
}

// evaluate checks s's stably ready pods against its union after an event of slice (""
// for Expect), closes the episodes of pods back, marks the intent shown, and makes the
// ready pods stably ready when no intent is outstanding.
func (c *Checker) evaluate(key string, s *service, slice, rv, event string) {
	now := c.now()
	u, dups := union(s)
	if len(dups) > 0 && !s.dupNow {
		c.rep.DuplicateEpisodes++
		if c.rep.DuplicateOf == "" {
			c.rep.DuplicateOf = fmt.Sprintf("Service %s pods %v at %s event of slice %s rv %s", key, dups, event, slice, rv)
		}
	}
	s.dupNow = len(dups) > 0
	for p, i := range s.open {
		if u[p] {
			v := &c.violations[i]
			v.Gap = now.Sub(v.At)
			v.BackIn = backIn(s, p)
			v.Kind = Lost
			if v.BackIn != v.Slice {
				v.Kind = Moved
			}
			delete(s.open, p)
		}
	}
	for p, since := range s.stable {
		c.rep.StableChecks++
		ready, in := u[p]
		if in && ready {
			continue
		}
		c.violations = append(c.violations, Violation{Service: key, Pod: p, Slice: slice, RV: rv, Event: event, At: now,
			NotReady: in, StableFor: now.Sub(since), Kind: Open})
		s.open[p] = len(c.violations) - 1
		delete(s.stable, p)
	}
	if s.outstanding && s.want != nil && maps.Equal(u, s.want) {
		s.outstanding = false
		d := now.Sub(s.begun)
		c.latencies = append(c.latencies, d)
		c.rep.Reflected++
		if d > c.rep.ReflectMax {
			c.rep.ReflectMax, c.rep.ReflectMaxOf = d, key
		}
	}
	if !s.outstanding {
		for p, ready := range u {
			if _, ok := s.stable[p]; ready && !ok {
				s.stable[p] = now
			}
		}
	}
}

// backIn names the slice that shows p ready (the first by name).
func backIn(s *service, p string) string {
	var names []string
	for n, v := range s.slices {
		if ep, ok := v.pods[p]; ok && ep.ready {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Violations returns every violation so far, in order.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Report sums up the checker's counts.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rep
	r.Violations = map[Kind]int{}
	for _, v := range c.violations {
		r.Violations[v.Kind]++
	}
	l := append([]time.Duration(nil), c.latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	if n := len(l); n > 0 {
		r.ReflectP50, r.ReflectP99 = l[n/2], l[min(n-1, n*99/100)]
	}
	return r
}

// Diff describes how a union differs from the wanted state ("" when equal).
func Diff(got, want map[string]bool) string {
	var d []string
	for p, r := range want {
		if g, ok := got[p]; !ok {
			d = append(d, fmt.Sprintf("%s missing", p))
		} else if g != r {
			d = append(d, fmt.Sprintf("%s ready=%v want %v", p, g, r))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			d = append(d, fmt.Sprintf("%s extra", p))
		}
	}
	sort.Strings(d)
	return strings.Join(d, ", ")
}
