package invariant

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// GenLabel is the pod template label that carries the test's generation of a template:
// the test raises it for every rollout, so that a pod's label tells its template apart
// without computing revision hashes.
const GenLabel = "kshard.io/stress-gen"

// The invariants, as they name a Violation.
const (
	Ordinal     = "statefulset-ordinal"
	PerNode     = "daemonset-pods-per-node"
	Surge       = "daemonset-surge"
	PDBStatus   = "pdb-status"
	PDBSequence = "pdb-observed-generation"
)

// Instant is a moment the test observed: the resourceVersion of the event that made it
// and the test's clock when it handled the event.
type Instant struct {
	RV uint64
	At time.Time
}

func (i Instant) String() string { return fmt.Sprintf("rv %d (%s)", i.RV, i.At.Format("15:04:05.000")) }

// Violation is one invariant broken at one instant.
type Violation struct {
	Invariant string
	Object    string // kind namespace/name
	Instant   Instant
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s at %s: %s", v.Invariant, v.Object, v.Instant, v.Detail)
}

// Lag describes the instants at which a budget's last written disruptionsAllowed was
// above what its healthy pods allowed in the test's current view (the lag every
// implementation has between a pod's change and the next status): how many such
// episodes, and the longest until a status or a pod change ended it.
type Lag struct {
	Episodes  int
	Longest   time.Duration
	LongestOf string
	Open      int // episodes not ended when the report was made
}

// Report counts what the checker saw and checked.
type Report struct {
	PodEvents       int
	OrdinalChecks   int // StatefulSet pod events checked for a second pod of the ordinal
	DaemonSetChecks int // DaemonSet pod events after which every node of the set was checked
	PDBStatuses     int // status versions checked against the pod views
	PDBPending      int // status versions not checked yet (the pod watch has not passed them)
	UnknownDeletes  int // pods whose deletion was only seen by a relist
	// StatefulSetDeletes counts StatefulSet pods deleted, by the grace period of their
	// first deletion observed (the controller's: the template's; kwok's forced: 0).
	StatefulSetDeletes map[int64]int
	// Per DaemonSet (namespace/name): the most nodes surging at once (an old pod beside a
	// new one not Ready), the most live pods on one node, and the most live pods above the
	// desired count.
	MaxSurging, MaxPerNode, MaxAbove map[string]int
	Lag                              Lag
	Violations                       map[string]int // by invariant
}

type nsName struct{ ns, name string }

func (k nsName) String() string { return k.ns + "/" + k.name }

type ordinalKey struct {
	ns, set string
	ordinal int
}

type pod struct {
	uid                  types.UID
	ns, name             string
	labels               map[string]string
	ownerKind, ownerName string
	ordinal              int // StatefulSet pods: the ordinal filed under at creation
	node                 string
	gen                  int // -1 without GenLabel
	revision             string
	ready, deleting      bool
	terminal             bool
	deleted              bool
	// firstDeletionGrace is the grace period of the first deletion observed (nil: none):
	// 0 is a forced delete (kwok's), the controllers' deletes use the template's.
	firstDeletionGrace *int64
	created            Instant
}

type daemon struct {
	key      nsName
	maxSurge int
	desired  int
	gen      int
}

type segment struct {
	rv                             uint64
	healthy, matched, scaleExpects int32
	unknownOwner                   bool
}

type pendingStatus struct {
	at     Instant
	status policyv1.PodDisruptionBudgetStatus
}

type budget struct {
	key      nsName
	selector labels.Selector
	specs    map[int64]policyv1.PodDisruptionBudgetSpec
	segments []segment
	cmin     uint64 // the pod view of the last status checked: the next one is not older
	last     *policyv1.PodDisruptionBudgetStatus
	lastGen  int64 // highest status.observedGeneration seen
	pending  []pendingStatus
	lagSince *Instant
}

// Checker follows the pods and budgets of a run. Register the StatefulSets, DaemonSets
// and budgets (AddStatefulSet, AddDaemonSet, AddPDB) before creating them, feed it every
// event of one pod informer and one PodDisruptionBudget informer (Handlers), and raise a
// DaemonSet's generation (SetDaemonSetGen) before the update that starts its rollout.
// Safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	now        func() time.Time
	podRV      uint64
	pods       map[types.UID]*pod
	byNS       map[string]map[types.UID]*pod
	ordinals   map[ordinalKey]map[types.UID]string
	history    map[ordinalKey][]*pod
	sets       map[nsName]int32
	daemons    map[nsName]*daemon
	pdbs       map[nsName]*budget
	violations []Violation
	report     Report
	// reported limits the violations kept per invariant and object; all are counted.
	reported map[string]int
}

// MaxPerObject is how many violations of one invariant on one object are kept with their
// details (all are counted in Report.Violations).
const MaxPerObject = 5

// New returns an empty checker; now is its clock (time.Now when nil).
func New(now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{now: now, pods: map[types.UID]*pod{}, byNS: map[string]map[types.UID]*pod{},
		ordinals: map[ordinalKey]map[types.UID]string{}, history: map[ordinalKey][]*pod{},
		sets: map[nsName]int32{}, daemons: map[nsName]*daemon{}, pdbs: map[nsName]*budget{},
		report: Report{MaxSurging: map[string]int{}, MaxPerNode: map[string]int{}, MaxAbove: map[string]int{},
			Violations: map[string]int{}, StatefulSetDeletes: map[int64]int{}}, reported: map[string]int{}}
}

// AddStatefulSet registers a StatefulSet's replicas (its scale, for budgets whose expected
// count is the scale of the pods' controllers).
func (c *Checker) AddStatefulSet(ns, name string, replicas int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sets[nsName{ns, name}] = replicas
}

// AddDaemonSet registers a DaemonSet that should run on desired nodes with maxSurge
// resolved (an absolute number), at template generation gen.
func (c *Checker) AddDaemonSet(ns, name string, maxSurge, desired, gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.daemons[nsName{ns, name}] = &daemon{key: nsName{ns, name}, maxSurge: maxSurge, desired: desired, gen: gen}
}

// SetDaemonSetGen raises the DaemonSet's template generation: from now on its pods of
// lower generations are old. Call it before the update that carries gen.
func (c *Checker) SetDaemonSetGen(ns, name string, gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.daemons[nsName{ns, name}]; d != nil {
		d.gen = gen
	}
}

// AddPDB registers a budget about to be created (its selector, and its spec as its first
// generation).
func (c *Checker) AddPDB(pdb *policyv1.PodDisruptionBudget) error {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &budget{key: nsName{pdb.Namespace, pdb.Name}, selector: sel, specs: map[int64]policyv1.PodDisruptionBudgetSpec{1: pdb.Spec}}
	c.pdbs[b.key] = b
	b.segments = []segment{c.countFor(b, c.podRV)}
	return nil
}

// Handlers returns the event handlers for a pod informer and a PodDisruptionBudget
// informer.
func (c *Checker) Handlers() (pods, pdbs cache.ResourceEventHandlerFuncs) {
	pods = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				c.OnPod(p)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, _ := old.(*corev1.Pod)
			p, ok := cur.(*corev1.Pod)
			if !ok {
				return
			}
			if o != nil && o.UID != p.UID {
				// A relist replaced a pod by another of its name: the first one is gone.
				c.OnPodDelete(o)
			}
			c.OnPod(p)
		},
		DeleteFunc: c.OnPodDelete,
	}
	pdbs = cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*policyv1.PodDisruptionBudget); ok {
				c.OnPDB(p)
			}
		},
		UpdateFunc: func(_, cur any) {
			if p, ok := cur.(*policyv1.PodDisruptionBudget); ok {
				c.OnPDB(p)
			}
		},
	}
	return pods, pdbs
}

func parseRV(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// OnPod handles a pod added or changed.
func (c *Checker) OnPod(cur *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.instant(cur.ResourceVersion)
	p := c.pods[cur.UID]
	if p == nil {
		p = &pod{uid: cur.UID, ns: cur.Namespace, name: cur.Name, created: at}
		c.pods[cur.UID] = p
		if c.byNS[p.ns] == nil {
			c.byNS[p.ns] = map[types.UID]*pod{}
		}
		c.byNS[p.ns][p.uid] = p
		fill(p, cur)
		if p.ownerKind == "StatefulSet" {
			p.ordinal = ordinalOf(cur)
			k := ordinalKey{p.ns, p.ownerName, p.ordinal}
			c.history[k] = append(c.history[k], p)
		}
	} else {
		fill(p, cur)
	}
	c.report.PodEvents++
	c.check(p, at)
}

// OnPodDelete handles a pod's deletion (a *corev1.Pod or a cache.DeletedFinalStateUnknown).
func (c *Checker) OnPodDelete(obj any) {
	cur, ok := obj.(*corev1.Pod)
	unknown := false
	if !ok {
		if d, ok2 := obj.(cache.DeletedFinalStateUnknown); ok2 {
			cur, _ = d.Obj.(*corev1.Pod)
			unknown = true
		}
	}
	if cur == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.instant(cur.ResourceVersion)
	if unknown {
		c.report.UnknownDeletes++
		// The last state known, not the deletion: the instant is no later than that.
		at.RV = c.podRV
	}
	p := c.pods[cur.UID]
	if p == nil {
		// Created and deleted while the watch was away: known only from its last state.
		p = &pod{uid: cur.UID, ns: cur.Namespace, name: cur.Name, created: at}
		fill(p, cur)
		if p.ownerKind == "StatefulSet" {
			p.ordinal = ordinalOf(cur)
			k := ordinalKey{p.ns, p.ownerName, p.ordinal}
			c.history[k] = append(c.history[k], p)
		}
	} else {
		fill(p, cur)
	}
	p.deleted = true
	if p.ownerKind == "StatefulSet" {
		g := int64(-1)
		if p.firstDeletionGrace != nil {
			g = *p.firstDeletionGrace
		}
		c.report.StatefulSetDeletes[g]++
	}
	delete(c.pods, p.uid)
	delete(c.byNS[p.ns], p.uid)
	c.report.PodEvents++
	c.check(p, at)
}

func (c *Checker) instant(rv string) Instant {
	r := parseRV(rv)
	if r > c.podRV {
		c.podRV = r
	}
	return Instant{RV: r, At: c.now()}
}

func fill(p *pod, cur *corev1.Pod) {
	p.labels = cur.Labels
	if ref := metav1.GetControllerOf(cur); ref != nil {
		p.ownerKind, p.ownerName = ref.Kind, ref.Name
	}
	p.node = nodeOf(cur)
	p.gen = -1
	if g, err := strconv.Atoi(cur.Labels[GenLabel]); err == nil {
		p.gen = g
	}
	p.revision = cur.Labels[appsv1.ControllerRevisionHashLabelKey]
	p.ready = podReady(cur)
	p.deleting = cur.DeletionTimestamp != nil
	p.terminal = cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed
	if p.deleting && p.firstDeletionGrace == nil {
		g := int64(-1)
		if cur.DeletionGracePeriodSeconds != nil {
			g = *cur.DeletionGracePeriodSeconds
		}
		p.firstDeletionGrace = &g
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeOf is the pod's node: spec.nodeName, or before scheduling the node a DaemonSet pod
// is pinned to by its required node affinity on metadata.name.
func nodeOf(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// ordinalOf is a StatefulSet pod's ordinal: its apps.kubernetes.io/pod-index label, or the
// number after its name's last dash.
func ordinalOf(p *corev1.Pod) int {
	s := p.Labels[appsv1.PodIndexLabel]
	if s == "" {
		s = p.Name[strings.LastIndex(p.Name, "-")+1:]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func (c *Checker) violate(inv, object string, at Instant, format string, args ...any) {
	c.report.Violations[inv]++
	k := inv + " " + object
	c.reported[k]++
	if c.reported[k] <= MaxPerObject {
		c.violations = append(c.violations, Violation{Invariant: inv, Object: object, Instant: at, Detail: fmt.Sprintf(format, args...)})
	}
}

// check runs every invariant p's change may break.
func (c *Checker) check(p *pod, at Instant) {
	switch p.ownerKind {
	case "StatefulSet":
		c.checkOrdinal(p, at)
	case "DaemonSet":
		if d := c.daemons[nsName{p.ns, p.ownerName}]; d != nil {
			c.checkDaemon(d, at)
		}
	}
	for _, b := range c.pdbs {
		if b.key.ns != p.ns || !b.selector.Matches(labels.Set(p.labels)) {
			continue
		}
		s := c.countFor(b, at.RV)
		if l := b.segments[len(b.segments)-1]; l.healthy != s.healthy || l.matched != s.matched ||
			l.scaleExpects != s.scaleExpects || l.unknownOwner != s.unknownOwner {
			b.segments = append(b.segments, s)
		}
		c.lag(b, at)
	}
	c.flush()
}

func (c *Checker) checkOrdinal(p *pod, at Instant) {
	k := ordinalKey{p.ns, p.ownerName, p.ordinal}
	c.report.OrdinalChecks++
	live := c.ordinals[k]
	if p.deleted {
		delete(live, p.uid)
		return
	}
	if live == nil {
		live = map[types.UID]string{}
		c.ordinals[k] = live
	}
	live[p.uid] = p.name
	if len(live) > 1 {
		var names []string
		for uid, name := range live {
			names = append(names, fmt.Sprintf("%s (uid %s)", name, uid))
		}
		sort.Strings(names)
		c.violate(Ordinal, "StatefulSet "+p.ns+"/"+p.ownerName, at, "ordinal %d has %d pods at once: %s",
			k.ordinal, len(live), strings.Join(names, ", "))
	}
}

func (c *Checker) checkDaemon(d *daemon, at Instant) {
	c.report.DaemonSetChecks++
	perNode := map[string]int{}
	old := map[string]bool{}
	newNotReady := map[string]bool{}
	total := 0
	for _, p := range c.byNS[d.key.ns] {
		if p.ownerKind != "DaemonSet" || p.ownerName != d.key.name || p.deleting || p.terminal {
			continue
		}
		total++
		perNode[p.node]++
		switch {
		case p.gen < d.gen:
			old[p.node] = true
		case !p.ready:
			newNotReady[p.node] = true
		}
	}
	var surging []string
	for n := range newNotReady {
		if old[n] {
			surging = append(surging, n)
		}
	}
	key := d.key.String()
	c.report.MaxSurging[key] = max(c.report.MaxSurging[key], len(surging))
	c.report.MaxAbove[key] = max(c.report.MaxAbove[key], total-d.desired)
	limit := 1
	if d.maxSurge > 0 {
		limit = 2
	}
	for n, k := range perNode {
		c.report.MaxPerNode[key] = max(c.report.MaxPerNode[key], k)
		if k > limit {
			c.violate(PerNode, "DaemonSet "+key, at, "node %q runs %d live pods of the set (at most %d with maxSurge %d)", n, k, limit, d.maxSurge)
		}
	}
	if len(surging) > d.maxSurge {
		sort.Strings(surging)
		c.violate(Surge, "DaemonSet "+key, at, "%d nodes run an old pod beside a new one not Ready (maxSurge %d, generation %d): %s",
			len(surging), d.maxSurge, d.gen, strings.Join(surging, ", "))
	}
}

// countFor is the view of b's pods now: matched (every pod its selector selects, being
// deleted or not), healthy (Ready and not being deleted) and the sum of the scales of
// their distinct controllers.
func (c *Checker) countFor(b *budget, rv uint64) segment {
	s := segment{rv: rv}
	owners := map[string]bool{}
	for _, p := range c.byNS[b.key.ns] {
		if !b.selector.Matches(labels.Set(p.labels)) {
			continue
		}
		s.matched++
		if p.ready && !p.deleting {
			s.healthy++
		}
		if owners[p.ownerKind+"/"+p.ownerName] {
			continue
		}
		owners[p.ownerKind+"/"+p.ownerName] = true
		if r, ok := c.sets[nsName{p.ns, p.ownerName}]; ok && p.ownerKind == "StatefulSet" {
			s.scaleExpects += r
		} else {
			s.unknownOwner = true
		}
	}
	return s
}

// OnPDB handles a budget added or changed.
func (c *Checker) OnPDB(pdb *policyv1.PodDisruptionBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := Instant{RV: parseRV(pdb.ResourceVersion), At: c.now()}
	b := c.pdbs[nsName{pdb.Namespace, pdb.Name}]
	if b == nil {
		return
	}
	b.specs[pdb.Generation] = pdb.Spec
	st := pdb.Status
	if b.last != nil && sameStatus(*b.last, st) {
		return
	}
	b.last = st.DeepCopy()
	if st.ObservedGeneration == 0 {
		return // not computed yet: the status the budget was created with
	}
	object := "PodDisruptionBudget " + b.key.String()
	if st.ObservedGeneration < b.lastGen {
		c.violate(PDBSequence, object, at, "status.observedGeneration %d after %d", st.ObservedGeneration, b.lastGen)
	}
	if st.ObservedGeneration > pdb.Generation {
		c.violate(PDBSequence, object, at, "status.observedGeneration %d above generation %d", st.ObservedGeneration, pdb.Generation)
	}
	b.lastGen = max(b.lastGen, st.ObservedGeneration)
	b.pending = append(b.pending, pendingStatus{at: at, status: *st.DeepCopy()})
	c.lag(b, at)
	c.flush()
}

func sameStatus(a, b policyv1.PodDisruptionBudgetStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.CurrentHealthy != b.CurrentHealthy || a.DesiredHealthy != b.DesiredHealthy ||
		a.ExpectedPods != b.ExpectedPods || a.DisruptionsAllowed != b.DisruptionsAllowed || len(a.DisruptedPods) != len(b.DisruptedPods) ||
		len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// DesiredHealthy is upstream's desiredHealthy for a spec and an expected count
// (pkg/controller/disruption getExpectedPodCount): maxUnavailable and percentages are
// scaled on expected rounding up.
func DesiredHealthy(spec policyv1.PodDisruptionBudgetSpec, expected int32) (int32, error) {
	switch {
	case spec.MaxUnavailable != nil:
		mu, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, err
		}
		return max(0, expected-int32(mu)), nil
	case spec.MinAvailable != nil && spec.MinAvailable.Type == intstr.Int:
		return spec.MinAvailable.IntVal, nil
	case spec.MinAvailable != nil:
		ma, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(expected), true)
		return int32(ma), err
	}
	return 0, nil
}

// byScale reports whether the spec's expected count is the scale of the pods' controllers
// (a maxUnavailable, or a percentage minAvailable), not the number of pods selected.
func byScale(spec policyv1.PodDisruptionBudgetSpec) bool {
	return spec.MaxUnavailable != nil || (spec.MinAvailable != nil && spec.MinAvailable.Type == intstr.String)
}

// want is the status upstream writes for a view: currentHealthy, desiredHealthy,
// expectedPods, disruptionsAllowed.
func want(spec policyv1.PodDisruptionBudgetSpec, s segment) (healthy, desired, expected, allowed int32, ok bool) {
	expected = s.matched
	if byScale(spec) {
		if s.unknownOwner {
			return 0, 0, 0, 0, false
		}
		expected = s.scaleExpects
	}
	desired, err := DesiredHealthy(spec, expected)
	if err != nil {
		return 0, 0, 0, 0, false
	}
	allowed = s.healthy - desired
	if expected <= 0 || allowed < 0 {
		allowed = 0
	}
	return s.healthy, desired, expected, allowed, true
}

// flush checks the statuses the pod watch has passed: every pod event below a status's
// resourceVersion has been seen, so the views the controller could have had are known.
func (c *Checker) flush() {
	for _, b := range c.pdbs {
		n := 0
		for _, p := range b.pending {
			if p.at.RV >= c.podRV {
				break
			}
			c.checkStatus(b, p)
			n++
		}
		b.pending = b.pending[n:]
	}
}

func (c *Checker) checkStatus(b *budget, p pendingStatus) {
	c.report.PDBStatuses++
	object := "PodDisruptionBudget " + b.key.String()
	st := p.status
	spec, ok := b.specs[st.ObservedGeneration]
	if !ok {
		c.violate(PDBStatus, object, p.at, "status.observedGeneration %d names a generation the watch never saw", st.ObservedGeneration)
		return
	}
	// The first view not older than cmin: the last segment starting at or before it.
	i := sort.Search(len(b.segments), func(i int) bool { return b.segments[i].rv > b.cmin })
	i = max(0, i-1)
	var tried []string
	bestAllowed := int32(-1)
	for ; i < len(b.segments) && b.segments[i].rv < p.at.RV; i++ {
		s := b.segments[i]
		h, d, e, a, ok := want(spec, s)
		if !ok {
			tried = append(tried, fmt.Sprintf("rv %d: owner of a pod unknown", s.rv))
			continue
		}
		bestAllowed = max(bestAllowed, a)
		if st.CurrentHealthy == h && st.DesiredHealthy == d && st.ExpectedPods == e && st.DisruptionsAllowed == a {
			b.cmin = max(b.cmin, s.rv)
			c.checkCondition(b, p)
			return
		}
		tried = append(tried, fmt.Sprintf("rv %d: healthy %d of %d selected, expected %d, desired %d, allowed %d", s.rv, h, s.matched, e, d, a))
	}
	if len(tried) > 6 {
		tried = append(tried[:3], append([]string{fmt.Sprintf("… %d more …", len(tried)-6)}, tried[len(tried)-3:]...)...)
	}
	over := ""
	if st.DisruptionsAllowed > bestAllowed {
		over = fmt.Sprintf("; disruptionsAllowed %d is above what the healthy pods allow in every such view (at most %d)", st.DisruptionsAllowed, max(0, bestAllowed))
	}
	c.violate(PDBStatus, object, p.at, "status (observedGeneration %d) currentHealthy %d desiredHealthy %d expectedPods %d disruptionsAllowed %d matches no view of its pods from rv %d to the write%s; views: %s",
		st.ObservedGeneration, st.CurrentHealthy, st.DesiredHealthy, st.ExpectedPods, st.DisruptionsAllowed, b.cmin, over, strings.Join(tried, "; "))
}

// checkCondition: DisruptionAllowed is True (SufficientPods) exactly when a disruption is
// allowed, False (InsufficientPods) otherwise.
func (c *Checker) checkCondition(b *budget, p pendingStatus) {
	st := p.status
	cond := (*metav1.Condition)(nil)
	for i := range st.Conditions {
		if st.Conditions[i].Type == policyv1.DisruptionAllowedCondition {
			cond = &st.Conditions[i]
		}
	}
	wantStatus, wantReason := metav1.ConditionFalse, policyv1.InsufficientPodsReason
	if st.DisruptionsAllowed > 0 {
		wantStatus, wantReason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	if cond == nil || cond.Status != wantStatus || cond.Reason != wantReason {
		c.violate(PDBStatus, "PodDisruptionBudget "+b.key.String(), p.at, "disruptionsAllowed %d with condition %+v, want %s %s",
			st.DisruptionsAllowed, cond, wantStatus, wantReason)
	}
}

// lag follows the episodes in which b's last status allows more disruptions than its
// healthy pods do in the current view.
func (c *Checker) lag(b *budget, at Instant) {
	if b.last == nil || b.last.ObservedGeneration == 0 {
		return
	}
	cur := b.segments[len(b.segments)-1]
	stale := b.last.DisruptionsAllowed > max(0, cur.healthy-b.last.DesiredHealthy)
	switch {
	case stale && b.lagSince == nil:
		a := at
		b.lagSince = &a
		c.report.Lag.Episodes++
	case !stale && b.lagSince != nil:
		if d := at.At.Sub(b.lagSince.At); d > c.report.Lag.Longest {
			c.report.Lag.Longest, c.report.Lag.LongestOf = d, fmt.Sprintf("%s from %s", b.key, b.lagSince)
		}
		b.lagSince = nil
	}
}

// PodRV is the highest resourceVersion the pod watch has delivered.
func (c *Checker) PodRV() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podRV
}

// DaemonSetSettled reports whether the DaemonSet runs, in the test's view, exactly one
// live pod on each of its desired nodes, every one of the current generation and Ready.
func (c *Checker) DaemonSetSettled(ns, name string) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.daemons[nsName{ns, name}]
	if d == nil {
		return false, "not registered"
	}
	nodes := map[string]int{}
	for _, p := range c.byNS[ns] {
		if p.ownerKind != "DaemonSet" || p.ownerName != name {
			continue
		}
		if p.deleting || p.terminal || p.gen != d.gen || !p.ready {
			return false, fmt.Sprintf("pod %s: generation %d (want %d), ready %v, deleting %v", p.name, p.gen, d.gen, p.ready, p.deleting)
		}
		nodes[p.node]++
	}
	for n, k := range nodes {
		if k != 1 {
			return false, fmt.Sprintf("node %s runs %d pods", n, k)
		}
	}
	if len(nodes) != d.desired {
		return false, fmt.Sprintf("%d nodes run a pod, want %d", len(nodes), d.desired)
	}
	return true, ""
}

// Violations returns the violations kept so far (at most MaxPerObject per invariant and
// object), in the order they happened.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Report returns the counts so far.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.report
	r.MaxSurging, r.MaxPerNode, r.MaxAbove, r.Violations = clone(r.MaxSurging), clone(r.MaxPerNode), clone(r.MaxAbove), clone(r.Violations)
	r.StatefulSetDeletes = make(map[int64]int, len(c.report.StatefulSetDeletes))
	for k, v := range c.report.StatefulSetDeletes {
		r.StatefulSetDeletes[k] = v
	}
	for _, b := range c.pdbs {
		r.PDBPending += len(b.pending)
		if b.lagSince != nil {
			r.Lag.Open++
		}
	}
	return r
}

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Recreations reports the StatefulSet ordinals created twice at one revision: explained
// counts those whose previous pod was deleted by force (kwok's second delete by name, see
// the package comment), unexplained lists the others. created is every StatefulSet pod
// the watch saw created.
func (c *Checker) Recreations() (created, explained int, unexplained []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]ordinalKey, 0, len(c.history))
	for k := range c.history {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		if a.set != b.set {
			return a.set < b.set
		}
		return a.ordinal < b.ordinal
	})
	for _, k := range keys {
		h := c.history[k]
		created += len(h)
		seen := map[string]bool{}
		for j, p := range h {
			if j > 0 && seen[p.revision] {
				prev := h[j-1]
				if prev.firstDeletionGrace != nil && *prev.firstDeletionGrace == 0 {
					explained++
				} else {
					grace := "never deleted"
					if prev.firstDeletionGrace != nil {
						grace = fmt.Sprintf("deleted with grace period %ds", *prev.firstDeletionGrace)
					}
					unexplained = append(unexplained, fmt.Sprintf("StatefulSet %s/%s ordinal %d: pod %s (uid %s, created at %s) is a second pod of revision %s; the pod before it (uid %s, revision %s) was %s",
						k.ns, k.set, k.ordinal, p.name, p.uid, p.created, p.revision, prev.uid, prev.revision, grace))
				}
			}
			seen[p.revision] = true
		}
	}
	return created, explained, unexplained
}
