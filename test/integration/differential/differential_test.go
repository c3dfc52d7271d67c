// Package differential runs scenarios of workload operations twice: against the reference
// control plane, whose kube-controller-manager runs all of upstream's own controllers, and
// against kshard (one coordinator, two shards, started once by TestMain and running every
// controller the scenarios compare) on the default control plane, whose
// kube-controller-manager runs without them. Scenarios run in parallel, each in
// namespaces of its own. After every step
// both sides are left to settle, then their objects are normalised (namespaces and
// generated names replaced) and compared, with the controllers' events per object (reason,
// type, source and count). A difference fails the test unless docs/controllers.md explains
// it and the explained table below names it.
//
// Among the scenarios: Deployments and ReplicaSets (apps_test.go,
// TestDifferentialAgainstUpstream), Jobs and CronJobs (batch_test.go,
// TestDifferentialBatch), what every namespace gets, its default ServiceAccount and
// kube-root-ca.crt (namespacelife_test.go, TestDifferentialNamespaceLife), claims with the
// PVC protection and ephemeral volume controllers (volumes_test.go,
// TestDifferentialVolumes), StatefulSets (statefulset_test.go,
// TestDifferentialStatefulSet), DaemonSets on nodes of the scenario's own
// (daemonset_test.go, TestDifferentialDaemonSet), the pod garbage collector's orphans
// and unscheduled terminating pods (podgc_test.go, TestDifferentialPodGC), the Service
// endpoints controllers (endpoints_test.go, TestDifferentialEndpoints) and HPAs on each
// cluster's own metrics pipeline (hpa_test.go, TestDifferentialHPA).
//
// KSHARD_DIFFERENTIAL_SELFCHECK=1 runs upstream against itself instead, to tell a value that
// depends on timing from one that depends on the implementation.
package differential

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/test/framework"
)

// kshardControllers are the controllers of the package's one kshard (a coordinator and two
// shards, started by TestMain and shared by every scenario, as the reference control
// plane's one kube-controller-manager is): every controller a scenario names, and, like
// the reference, the others that act on the same objects. A scenario whose controllers
// are not all here fails at once; add them here.
var kshardControllers = []string{
	"replicaset", "deployment", "replicationcontroller", "resourcequota", "job", "cronjob",
	"ttl-after-finished", "daemonset", "statefulset", "disruption", "garbagecollector",
	"namespace", "serviceaccount", "root-ca-cert-publisher", "podgc", "pvc-protection",
	"ephemeral-volume", "endpointslice", "endpoint", "endpointslicemirroring", "horizontalpodautoscaling",
}

// scenarioParallel is how many scenarios run at once: they spend their time waiting for
// both sides to settle, and each works in namespaces (and cluster-scoped objects named
// after them) of its own.
const scenarioParallel = 4

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:    kshardControllers,
		Shards:   2,
		Parallel: scenarioParallel,
		// kube-controller-manager's defaults, which the reference control plane runs with
		// (hack/cluster.sh gives its kube-controller-manager none of these flags): the
		// terminated-pod threshold, and the HPA's sync period, scale-down window, tolerance
		// and CPU sample rules. Stated, so that both sides run with equal settings
		// whatever kshard's own defaults are.
		ShardArgs: []string{"--terminated-pod-gc-threshold=12500",
			"--horizontal-pod-autoscaler-sync-period=15s", "--horizontal-pod-autoscaler-downscale-stabilization=5m0s",
			"--horizontal-pod-autoscaler-tolerance=0.1", "--horizontal-pod-autoscaler-cpu-initialization-period=5m0s",
			"--horizontal-pod-autoscaler-initial-readiness-delay=30s"},
	})
}

const (
	// quiet is how long a side's normalised state must stay unchanged to count as settled.
	quiet = 3 * time.Second
	// defaultStepTimeout bounds one step's settling unless the scenario says otherwise.
	defaultStepTimeout = 90 * time.Second
)

// timingDependent are event reasons whose count depends on retry or sync timing, not
// behaviour; their presence is compared, not their count (docs/controllers.md):
//   - FailedCreate: a failing create is retried with the work queue's exponential backoff
//     for as long as the step lasts.
//   - UnexpectedJob: the CronJob controller warns at every sync that finds a running Job
//     it owns but did not create (kubectl create job --from=cronjob), and it syncs at every
//     update of that Job, whose number depends on how its status writes fall together.
//   - FailedBinding: the ephemeral volume controller warns at every retry of a pod whose
//     ephemeral volume's claim name is taken by a claim that is not the pod's, with the
//     work queue's exponential backoff, for as long as the step lasts.
var timingDependent = map[string]bool{"FailedCreate": true, "UnexpectedJob": true, "FailedBinding": true}

// explained lists differences docs/controllers.md explains, by the compared path's
// prefix; they are logged, not failed.
var explained = map[string]string{}

// SelfCheckEnv, set to 1, runs the scenario on the reference control plane on both sides
// (two sets of namespaces, upstream against itself): what differs then depends on timing,
// not on the implementation. It is how a difference is told from noise.
const SelfCheckEnv = "KSHARD_DIFFERENTIAL_SELFCHECK"

// side is one cluster running the scenario.
type side struct {
	name string
	f    *framework.Framework
	// ns maps the scenario's namespace names (main, quota, …) to the real ones.
	ns map[string]string
	// stepStarted is when the current step started, the same instant on both sides.
	stepStarted time.Time
}

func (s *side) kubectl(ctx context.Context, ns string, args ...string) error {
	kubectl, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
	if err != nil {
		return fmt.Errorf("hack/tools.sh path kubectl: %w", err)
	}
	full := append([]string{"--kubeconfig", s.f.Kubeconfig, "-n", s.ns[ns]}, args...)
	out, err := exec.CommandContext(ctx, strings.TrimSpace(string(kubectl)), full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// step is one operation of the scenario, run on both sides.
type step struct {
	name string
	do   func(ctx context.Context, s *side) error
	// awaits are compared paths (or their beginnings) that must be in the snapshot before
	// the step counts as settled: what a step waits for beyond the scenario's own rule.
	awaits []string
}

// scenario is one differential test: the steps, and how a side's objects are read.
type scenario struct {
	// controllers are the kshard controllers the scenario compares (all in
	// kshardControllers); the kube-controller-manager beside kshard must run none of them.
	controllers []string
	// namespaces are the scenario's logical namespaces, each created on both sides.
	namespaces []string
	steps      []step
	// stepTimeout bounds one step's settling (defaultStepTimeout when zero).
	stepTimeout time.Duration
	// snapshot reads and normalises a side's objects and says whether the step is done.
	snapshot func(ctx context.Context, s *side) (view, error)
	// cleanup, when set, runs on each side when the test ends, before the scenario's
	// namespaces are deleted and while kshard still runs: for what the namespaces'
	// deletion does not remove (cluster-scoped objects, a test's own finalizers).
	cleanup func(ctx context.Context, s *side) error
}

// view is a side's state at one instant.
type view struct {
	values flat
	// pending lists why the side is not done with the step yet.
	pending notReady
	// events are the controllers' events, one line each with normalised messages, for the
	// investigation of a count difference.
	events []string
}

// run runs sc on the reference control plane and on kshard (or, with SelfCheckEnv=1, on
// the reference control plane twice) and fails on every unexplained difference.
//
// Scenarios run in parallel (scenarioParallel at a time), on the package's one kshard.
func (sc scenario) run(t *testing.T) {
	t.Parallel()
	uf := framework.Upstream(t)
	other := &side{name: "kshard", ns: map[string]string{}}
	if os.Getenv(SelfCheckEnv) == "1" {
		other.name, other.f = "upstream-again", uf
		t.Logf("%s=1: upstream against itself", SelfCheckEnv)
	} else {
		other.f = framework.Get(t)
		other.f.RequireKCMWithout(t, sc.controllers...)
		running := framework.RunningControllers(t)
		for _, c := range sc.controllers {
			if !slices.Contains(running.ByKShard, c) {
				t.Fatalf("controller %s is not among kshardControllers (kshard runs %v)", c, running.ByKShard)
			}
		}
		running.KShard.GuardAlone(t)
	}

	sides := []*side{{name: "upstream", f: uf, ns: map[string]string{}}, other}
	for _, s := range sides {
		for _, ns := range sc.namespaces {
			s.ns[ns] = s.f.Namespace(t, map[string]string{"kshard.io/e2e-differential": ns}).Name
		}
	}
	if sc.cleanup != nil {
		// Registered after the namespaces: runs before their deletion (and kshard's end).
		t.Cleanup(func() {
			for _, s := range sides {
				ctx, cancel := context.WithTimeout(context.Background(), defaultStepTimeout)
				if err := sc.cleanup(ctx, s); err != nil {
					t.Errorf("cleaning up on %s: %v", s.name, err)
				}
				cancel()
			}
		})
	}
	timeout := sc.stepTimeout
	if timeout == 0 {
		timeout = defaultStepTimeout
	}

	var diffs []string
	for stepNo, st := range sc.steps {
		start := time.Now()
		for _, s := range sides {
			s.stepStarted = start
		}
		views := make([]view, len(sides))
		var wg sync.WaitGroup
		errs := make([]error, len(sides))
		for i, s := range sides {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				if err := st.do(ctx, s); err != nil {
					errs[i] = fmt.Errorf("%s: %w", s.name, err)
					return
				}
				views[i], errs[i] = sc.settle(ctx, s, st)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("step %q: %v", st.name, err)
			}
		}
		d := compare(views[0].values, views[1].values, sides[0].name, sides[1].name)
		for i, s := range sides {
			writeLines(t, fmt.Sprintf("step%d-%s.txt", stepNo+1, s.name), views[i].values.lines())
			writeLines(t, fmt.Sprintf("step%d-%s-events.txt", stepNo+1, s.name), views[i].events)
		}
		t.Logf("step %q settled on both sides in %s: %d values compared, %d differ", st.name, time.Since(start).Round(time.Millisecond), len(views[0].values), len(d))
		for _, line := range d {
			diffs = append(diffs, fmt.Sprintf("%s: %s", st.name, line))
		}
	}
	failed := 0
	for _, d := range diffs {
		if why := explainedBy(d); why != "" {
			t.Logf("explained difference (%s): %s", why, d)
			continue
		}
		failed++
		t.Errorf("difference: %s", d)
	}
	if failed > 0 {
		t.Fatalf("%d unexplained differences between %s and %s", failed, sides[0].name, sides[1].name)
	}
}

// writeLines keeps lines, sorted, in the test's artifacts folder (a side's normalised state
// or its events after a step), for the investigation of a difference.
func writeLines(t *testing.T, name string, lines []string) {
	t.Helper()
	lines = append([]string(nil), lines...)
	sort.Strings(lines)
	if err := os.WriteFile(filepath.Join(framework.ArtifactsDir(t), name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func explainedBy(diff string) string {
	for prefix, why := range explained {
		if strings.Contains(diff, prefix) {
			return why
		}
	}
	return ""
}

func pollCtx(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// settle waits until the side's state is finished (the scenario's rule and the step's
// awaits) and has not changed for quiet, and returns it.
func (sc scenario) settle(ctx context.Context, s *side, st step) (view, error) {
	var (
		prev    flat
		since   time.Time
		lastErr error
	)
	for {
		cur, err := sc.snapshot(ctx, s)
		if err == nil {
			cur.pending = append(cur.pending, cur.values.missing(st.awaits)...)
		}
		switch {
		case err != nil:
			lastErr, prev = err, nil
		case !cur.pending.ok():
			lastErr, prev = cur.pending, nil
		case prev != nil && len(compare(prev, cur.values, "before", "now")) == 0:
			if time.Since(since) >= quiet {
				return cur, nil
			}
		default:
			prev, since, lastErr = cur.values, time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return view{}, fmt.Errorf("%s did not settle: %v", s.name, lastErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// notReady lists why a side is not done with a step yet.
type notReady []string

func (n notReady) ok() bool { return len(n) == 0 }
func (n notReady) Error() string {
	return fmt.Sprintf("%d objects not done, e.g. %s", len(n), n[0])
}

// flat is a normalised snapshot: one value per path.
type flat map[string]string

func (f flat) lines() []string {
	lines := make([]string, 0, len(f))
	for k, v := range f {
		lines = append(lines, k+" = "+v)
	}
	return lines
}

// missing lists the awaited paths no path of f begins with.
func (f flat) missing(awaits []string) notReady {
	var out notReady
	for _, a := range awaits {
		found := false
		for k := range f {
			if strings.HasPrefix(k, a) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, "awaiting "+a)
		}
	}
	return out
}

func compare(a, b flat, an, bn string) []string {
	var out []string
	for k, av := range a {
		if bv, ok := b[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %s %q, %s has none", k, an, av, bn))
		} else if av != bv {
			out = append(out, fmt.Sprintf("%s: %s %q, %s %q", k, an, av, bn, bv))
		}
	}
	for k, bv := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %s %q, %s has none", k, bn, bv, an))
		}
	}
	sort.Strings(out)
	return out
}

// normaliser replaces a side's namespaces, generated pod names and other names in
// messages.
type normaliser struct {
	replacer *strings.Replacer
	pod      *regexp.Regexp
}

// newNormaliser replaces the side's real namespaces by <ns:logical>, the generated names
// of the pods of owners (owner-xxxxx, or owner-<index>-xxxxx for an Indexed Job's) by
// owner-<pod> (owner-<index>-<pod>), then each key of rename by its value.
func newNormaliser(s *side, owners []string, rename map[string]string) normaliser {
	var pairs []string
	for logical, real := range s.ns {
		pairs = append(pairs, real, "<ns:"+logical+">")
	}
	for from, to := range rename {
		pairs = append(pairs, from, to)
	}
	n := normaliser{replacer: strings.NewReplacer(pairs...)}
	if len(owners) > 0 {
		quoted := make([]string, len(owners))
		for i, r := range owners {
			quoted[i] = regexp.QuoteMeta(r)
		}
		// Longest first, so that one owner name that prefixes another is not taken.
		sort.Slice(quoted, func(i, j int) bool { return len(quoted[i]) > len(quoted[j]) })
		n.pod = regexp.MustCompile(`\b(` + strings.Join(quoted, "|") + `)-([0-9]+-)?[a-z0-9]{5}\b`)
	}
	return n
}

func (n normaliser) text(s string) string {
	if n.pod != nil {
		s = n.pod.ReplaceAllString(s, "$1-$2<pod>")
	}
	return n.replacer.Replace(s)
}

// eventSet sums a side's events per object, type, reason and source.
type eventSet struct {
	counts map[eventKey]int
	lines  []string
	// withMessages also compares the distinct normalised messages of each object, type,
	// reason and source.
	withMessages bool
	// presenceOnly are further reasons whose presence is compared, not their count, in
	// one scenario (see timingDependent).
	presenceOnly map[string]bool
	messages     map[eventKey]map[string]bool
}

type eventKey struct{ object, typ, reason, source string }

// add counts ev under object (a normalised name of its involved object) and keeps its
// line for the events file.
func (e *eventSet) add(object string, ev *corev1.Event, text func(string) string) {
	if e.counts == nil {
		e.counts = map[eventKey]int{}
	}
	c := int(max(ev.Count, 1))
	if ev.Series != nil {
		c = max(c, int(ev.Series.Count))
	}
	k := eventKey{object, ev.Type, ev.Reason, ev.Source.Component}
	e.counts[k] += c
	if e.messages == nil {
		e.messages = map[eventKey]map[string]bool{}
	}
	if e.messages[k] == nil {
		e.messages[k] = map[string]bool{}
	}
	e.messages[k][text(ev.Message)] = true
	e.lines = append(e.lines, fmt.Sprintf("%s %s %s %s x%d: %s", ev.FirstTimestamp.Format("15:04:05"), object,
		ev.Type, ev.Reason, c, text(ev.Message)))
}

// put writes the counts into out; a timing-dependent reason's as "present".
func (e *eventSet) put(out flat) {
	for k, n := range e.counts {
		v := fmt.Sprint(n)
		if timingDependent[k.reason] || e.presenceOnly[k.reason] {
			v = "present"
		}
		p := fmt.Sprintf("Events of %s: %s %s from %s", k.object, k.typ, k.reason, k.source)
		out[p] = v
		if e.withMessages {
			var msgs []string
			for m := range e.messages[k] {
				msgs = append(msgs, fmt.Sprintf("%q", m))
			}
			sort.Strings(msgs)
			out[p+" messages"] = strings.Join(msgs, ", ")
		}
	}
}

// mergePatch merge-patches the named object through a typed client's resource.
func mergePatch[T any](ctx context.Context, c interface {
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error)
}, name, patch string) error {
	_, err := c.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// podsAndEvents lists a namespace's pods and events.
func (s *side) podsAndEvents(ctx context.Context, ns string) ([]corev1.Pod, []corev1.Event, error) {
	pods, err := s.f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	evs, err := s.f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, err
	}
	return pods.Items, evs.Items, nil
}

func putMap(out flat, prefix string, m map[string]string, n normaliser) {
	for k, v := range m {
		out[prefix+k] = n.text(v)
	}
}

func putOwners(out flat, p string, refs []metav1.OwnerReference, text func(string) string) {
	for _, ref := range refs {
		out[p+" owner "+ref.Kind+"/"+text(ref.Name)] = fmt.Sprintf("controller=%s blockOwnerDeletion=%s", ptr(ref.Controller), ptr(ref.BlockOwnerDeletion))
	}
}

func ptr[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}
