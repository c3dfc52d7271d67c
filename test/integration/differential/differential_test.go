// Package differential runs one scenario of Deployment and ReplicaSet operations twice:
// against the reference control plane, whose kube-controller-manager runs upstream's own
// deployment and replicaset controllers, and against kshard (one coordinator, two shards)
// on the default control plane, whose kube-controller-manager runs without them. After
// every step both sides are left to settle, then their objects are normalised (namespace
// and generated pod names replaced, ReplicaSets keyed by Deployment and image) and
// compared: ReplicaSets (names, labels, annotations, owner, spec and status, conditions),
// pods per ReplicaSet, Deployments (annotations, status, conditions) and the controllers'
// events per object (reason, type, source and count). A difference fails the test unless
// docs/controllers.md explains it and the explained table below names it.
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
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	// quiet is how long a side's normalised state must stay unchanged to count as settled.
	quiet = 3 * time.Second
	// stepTimeout bounds one step's settling.
	stepTimeout = 90 * time.Second
	imageV1     = "registry.k8s.io/e2e/app:v1"
	imageV2     = "registry.k8s.io/e2e/app:v2"
	imageV3     = "registry.k8s.io/e2e/app:v3"
	// orphanLabel selects the bare ReplicaSet's pods.
	orphanLabel = "kshard.io/e2e-orphans"
)

// timingDependent are event reasons whose count depends on retry timing, not behaviour:
// a failing create is retried with the work queue's exponential backoff for as long as
// the step lasts. Their presence is compared, not their count (docs/controllers.md).
var timingDependent = map[string]bool{"FailedCreate": true}

// explained lists differences docs/controllers.md explains, by the compared path's
// prefix; they are logged, not failed.
var explained = map[string]string{}

// side is one cluster running the scenario.
type side struct {
	name string
	f    *framework.Framework
	// ns maps the scenario's namespace names (main, quota) to the real ones.
	ns map[string]string
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
}

func deployment(name string, replicas int32, surge, unavailable string) *appsv1.Deployment {
	d := framework.NewRollingDeployment(name, replicas, intstr.Parse(surge), intstr.Parse(unavailable), imageV1, nil)
	return d
}

func (s *side) createDeployments(ctx context.Context, ns string, ds ...*appsv1.Deployment) error {
	for _, d := range ds {
		if _, err := s.f.Client.AppsV1().Deployments(s.ns[ns]).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", d.Name, err)
		}
	}
	return nil
}

func orphanPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{orphanLabel: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}, TerminationGracePeriodSeconds: new(int64)},
	}
}

var scenario = []step{
	{name: "create Deployments of every strategy and a ReplicaSet that adopts orphans", do: func(ctx context.Context, s *side) error {
		recreate := deployment("recreate", 2, "0", "0")
		recreate.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		minReady := deployment("minready", 2, "1", "0")
		minReady.Spec.MinReadySeconds = 3
		history := deployment("history", 1, "1", "0")
		history.Spec.RevisionHistoryLimit = new(int32(1))
		if err := s.createDeployments(ctx, "main",
			deployment("rolling", 3, "1", "0"), deployment("percent", 4, "25%", "25%"), recreate, minReady, history); err != nil {
			return err
		}
		for _, name := range []string{"orphan-a", "orphan-b"} {
			if _, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Create(ctx, orphanPod(name), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		// The ReplicaSet comes once its controller can have seen the orphans: when they run
		// (scheduled and started by kwok, so their creation was long sent to every watch).
		// Created at the same instant, the controller may count one orphan short and
		// create a pod too many, which upstream does too; that race is not the scenario.
		err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: orphanLabel})
			if err != nil {
				return false, err
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == 2, nil
		})
		if err != nil {
			return fmt.Errorf("orphan pods not running: %w", err)
		}
		three := int32(3)
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "orphans"},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: &three,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{orphanLabel: "true"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{orphanLabel: "true"}},
					Spec: orphanPod("").Spec},
			},
		}
		_, err = s.f.Client.AppsV1().ReplicaSets(s.ns["main"]).Create(ctx, rs, metav1.CreateOptions{})
		return err
	}},
	{name: "a Deployment beyond its namespace's pod quota", do: func(ctx context.Context, s *side) error {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
		if _, err := s.f.Client.CoreV1().ResourceQuotas(s.ns["quota"]).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return err
		}
		// Admission enforces a quota once the quota controller has filled its status in.
		err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			got, err := s.f.Client.CoreV1().ResourceQuotas(s.ns["quota"]).Get(ctx, "pods", metav1.GetOptions{})
			return err == nil && len(got.Status.Hard) > 0, err
		})
		if err != nil {
			return fmt.Errorf("quota status: %w", err)
		}
		return s.createDeployments(ctx, "quota", deployment("over-quota", 4, "25%", "25%"))
	}},
	{name: "scale", do: func(ctx context.Context, s *side) error {
		for _, a := range [][]string{{"deployment/rolling", "5"}, {"deployment/percent", "2"}, {"replicaset/orphans", "2"}} {
			if err := s.kubectl(ctx, "main", "scale", a[0], "--replicas="+a[1]); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "set image", do: func(ctx context.Context, s *side) error {
		for _, d := range []string{"rolling", "percent", "recreate", "minready", "history"} {
			if err := s.kubectl(ctx, "main", "set", "image", "deployment/"+d, "app="+imageV2); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "pause, then change image and scale while paused", do: func(ctx context.Context, s *side) error {
		for _, args := range [][]string{
			{"rollout", "pause", "deployment/percent"},
			{"set", "image", "deployment/percent", "app=" + imageV3},
			{"scale", "deployment/percent", "--replicas=3"},
			{"set", "image", "deployment/history", "app=" + imageV3},
		} {
			if err := s.kubectl(ctx, "main", args...); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "resume", do: func(ctx context.Context, s *side) error {
		return s.kubectl(ctx, "main", "rollout", "resume", "deployment/percent")
	}},
	{name: "rollout undo, and undo to a revision", do: func(ctx context.Context, s *side) error {
		if err := s.kubectl(ctx, "main", "rollout", "undo", "deployment/rolling"); err != nil {
			return err
		}
		return s.kubectl(ctx, "main", "rollout", "undo", "deployment/history", "--to-revision=2")
	}},
	{name: "an orphan is adopted, a relabelled pod released", do: func(ctx context.Context, s *side) error {
		if _, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Create(ctx, orphanPod("orphan-c"), metav1.CreateOptions{}); err != nil {
			return err
		}
		// Release: one of the ReplicaSet's pods stops matching its selector. Which pods the
		// earlier scale-down left is the deletion ranking's choice among equals, so take
		// the first by name.
		pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: orphanLabel + "=true"})
		if err != nil {
			return err
		}
		var owned []string
		for _, p := range pods.Items {
			if metav1.GetControllerOf(&p) != nil && p.DeletionTimestamp == nil {
				owned = append(owned, p.Name)
			}
		}
		if len(owned) == 0 {
			return fmt.Errorf("the ReplicaSet orphans has no pods to release")
		}
		sort.Strings(owned)
		return s.kubectl(ctx, "main", "label", "pod/"+owned[0], orphanLabel+"=released", "--overwrite")
	}},
}

// SelfCheckEnv, set to 1, runs the scenario on the reference control plane on both sides
// (two sets of namespaces, upstream against itself): what differs then depends on timing,
// not on the implementation. It is how a difference is told from noise.
const SelfCheckEnv = "KSHARD_DIFFERENTIAL_SELFCHECK"

func TestDifferentialAgainstUpstream(t *testing.T) {
	uf := framework.Upstream(t)
	other := &side{name: "kshard", ns: map[string]string{}}
	var k *framework.KShard
	if os.Getenv(SelfCheckEnv) == "1" {
		other.name, other.f = "upstream-again", uf
		t.Logf("%s=1: upstream against itself", SelfCheckEnv)
	} else {
		other.f = framework.Get(t)
		other.f.RequireKCMWithout(t, "replicaset", "deployment")
		k = other.f.NewKShard(t, framework.KShardOptions{ShardArgs: []string{"--controllers", "replicaset,deployment"}})
		k.GuardAlone(t)
		k.StartCoordinator("coordinator")
		k.StartShard("shard-1")
		k.StartShard("shard-2")
	}

	sides := []*side{{name: "upstream", f: uf, ns: map[string]string{}}, other}
	for _, s := range sides {
		for _, ns := range []string{"main", "quota"} {
			s.ns[ns] = s.f.Namespace(t, map[string]string{"kshard.io/e2e-differential": ns}).Name
		}
	}
	if k != nil {
		k.WaitAllOwned(t, 90*time.Second)
	}

	var diffs []string
	for stepNo, st := range scenario {
		start := time.Now()
		snaps := make([]flat, len(sides))
		var wg sync.WaitGroup
		errs := make([]error, len(sides))
		for i, s := range sides {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
				defer cancel()
				if err := st.do(ctx, s); err != nil {
					errs[i] = fmt.Errorf("%s: %w", s.name, err)
					return
				}
				snaps[i], errs[i] = s.settle(ctx)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("step %q: %v", st.name, err)
			}
		}
		d := compare(snaps[0], snaps[1], sides[0].name, sides[1].name)
		for i, s := range sides {
			writeSnapshot(t, fmt.Sprintf("step%d-%s.txt", stepNo+1, s.name), snaps[i])
			s.writeEvents(t, fmt.Sprintf("step%d-%s-events.txt", stepNo+1, s.name))
		}
		t.Logf("step %q settled on both sides in %s: %d values compared, %d differ", st.name, time.Since(start).Round(time.Millisecond), len(snaps[0]), len(d))
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

// writeSnapshot keeps a side's normalised state in the test's artifacts folder, one value
// per line, for the investigation of a difference.
func writeSnapshot(t *testing.T, name string, f flat) {
	t.Helper()
	lines := make([]string, 0, len(f))
	for k, v := range f {
		lines = append(lines, k+" = "+v)
	}
	sort.Strings(lines)
	if err := os.WriteFile(filepath.Join(framework.ArtifactsDir(t), name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeEvents keeps the side's Deployment and ReplicaSet events in the order they were
// first seen, with normalised messages, for the investigation of a count difference.
func (s *side) writeEvents(t *testing.T, name string) {
	t.Helper()
	var lines []string
	for logical, ns := range s.ns {
		evs, err := s.f.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("%s: listing events: %v", s.name, err)
			return
		}
		rss, err := s.f.Client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("%s: listing ReplicaSets: %v", s.name, err)
			return
		}
		var names []string
		for _, rs := range rss.Items {
			names = append(names, rs.Name)
		}
		norm := newNormaliser(s, names)
		for _, ev := range evs.Items {
			if k := ev.InvolvedObject.Kind; k != "Deployment" && k != "ReplicaSet" {
				continue
			}
			lines = append(lines, fmt.Sprintf("%s %s/%s %s %s x%d: %s", ev.FirstTimestamp.Format("15:04:05"), logical,
				ev.InvolvedObject.Name, ev.Type, ev.Reason, max(ev.Count, 1), norm.text(ev.Message)))
		}
	}
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

// settle waits until the side's state is finished and has not changed for quiet, and
// returns it.
func (s *side) settle(ctx context.Context) (flat, error) {
	var (
		prev    flat
		since   time.Time
		lastErr error
	)
	for {
		cur, ready, err := s.snapshot(ctx)
		switch {
		case err != nil:
			lastErr, prev = err, nil
		case !ready.ok():
			lastErr, prev = ready, nil
		case prev != nil && len(compare(prev, cur, "before", "now")) == 0:
			if time.Since(since) >= quiet {
				return cur, nil
			}
		default:
			prev, since, lastErr = cur, time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not settle: %v", s.name, lastErr)
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

// normaliser replaces a side's namespace and generated pod names in messages.
type normaliser struct {
	replacer *strings.Replacer
	pod      *regexp.Regexp
}

func newNormaliser(s *side, rsNames []string) normaliser {
	var pairs []string
	for logical, real := range s.ns {
		pairs = append(pairs, real, "<ns:"+logical+">")
	}
	n := normaliser{replacer: strings.NewReplacer(pairs...)}
	if len(rsNames) > 0 {
		quoted := make([]string, len(rsNames))
		for i, r := range rsNames {
			quoted[i] = regexp.QuoteMeta(r)
		}
		// Longest first, so that one ReplicaSet name that prefixes another is not taken.
		sort.Slice(quoted, func(i, j int) bool { return len(quoted[i]) > len(quoted[j]) })
		n.pod = regexp.MustCompile(`\b(` + strings.Join(quoted, "|") + `)-[a-z0-9]{5}\b`)
	}
	return n
}

func (n normaliser) text(s string) string {
	s = n.replacer.Replace(s)
	if n.pod != nil {
		s = n.pod.ReplaceAllString(s, "$1-<pod>")
	}
	return s
}

// rsKey names a ReplicaSet independently of its hash: its owner and image (a ReplicaSet
// without an owner by its own name).
func rsKey(rs *appsv1.ReplicaSet) string {
	ref := metav1.GetControllerOf(rs)
	if ref == nil {
		return "ReplicaSet:" + rs.Name
	}
	owner := ref.Kind + ":" + ref.Name
	image := ""
	if cs := rs.Spec.Template.Spec.Containers; len(cs) > 0 {
		image = cs[0].Image
	}
	return owner + "@" + image
}

// snapshot reads and normalises the side's objects, and says whether the current step is
// done.
func (s *side) snapshot(ctx context.Context) (flat, notReady, error) {
	out := flat{}
	var pending notReady
	rsByUID := map[string]string{}
	var rsNames []string
	type listed struct {
		ns   string
		deps []appsv1.Deployment
		rss  []appsv1.ReplicaSet
		pods []corev1.Pod
		evs  []corev1.Event
	}
	var all []listed
	for logical, ns := range s.ns {
		l := listed{ns: logical}
		deps, err := s.f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		rss, err := s.f.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		pods, err := s.f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, err
		}
		evs, err := s.f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
		l.deps, l.rss, l.pods, l.evs = deps.Items, rss.Items, pods.Items, evs.Items
		for i := range l.rss {
			rsByUID[string(l.rss[i].UID)] = logical + "/" + rsKey(&l.rss[i])
			rsNames = append(rsNames, l.rss[i].Name)
		}
		all = append(all, l)
	}
	norm := newNormaliser(s, rsNames)
	for _, l := range all {
		for i := range l.deps {
			d := &l.deps[i]
			p := "Deployment " + l.ns + "/" + d.Name
			putDeployment(out, p, d, norm)
			switch {
			case d.Status.ObservedGeneration < d.Generation:
				pending = append(pending, p+": generation not observed")
			case d.Spec.Paused:
			case l.ns == "quota":
				if !hasCondition(d.Status.Conditions, string(appsv1.DeploymentReplicaFailure)) {
					pending = append(pending, p+": no ReplicaFailure condition yet")
				}
			default:
				if err := framework.DeploymentComplete(d); err != nil {
					pending = append(pending, err.Error())
				}
			}
		}
		for i := range l.rss {
			rs := &l.rss[i]
			p := "ReplicaSet " + l.ns + "/" + rsKey(rs)
			putReplicaSet(out, p, rs, norm)
			want := int32(1)
			if rs.Spec.Replicas != nil {
				want = *rs.Spec.Replicas
			}
			if rs.Status.ObservedGeneration < rs.Generation || (l.ns != "quota" && (rs.Status.Replicas != want || rs.Status.AvailableReplicas != want)) {
				pending = append(pending, fmt.Sprintf("%s: %d/%d replicas available, generation %d observed %d", p, rs.Status.AvailableReplicas, want, rs.Generation, rs.Status.ObservedGeneration))
			}
		}
		counts := map[string]int{}
		for i := range l.pods {
			pod := &l.pods[i]
			if pod.DeletionTimestamp != nil {
				pending = append(pending, "pod "+pod.Name+" terminating")
				continue
			}
			owner := l.ns + "/<no controller>"
			if ref := metav1.GetControllerOf(pod); ref != nil {
				owner = rsByUID[string(ref.UID)]
			}
			counts[owner]++
		}
		for owner, n := range counts {
			out["Pods of "+owner] = fmt.Sprint(n)
		}
		type evKey struct{ object, typ, reason, source string }
		events := map[evKey]int{}
		for i := range l.evs {
			ev := &l.evs[i]
			kind := ev.InvolvedObject.Kind
			if kind != "Deployment" && kind != "ReplicaSet" {
				continue
			}
			object := l.ns + "/" + kind + " " + ev.InvolvedObject.Name
			if kind == "ReplicaSet" {
				if key, ok := rsByUID[string(ev.InvolvedObject.UID)]; ok {
					object = "ReplicaSet " + key
				} else {
					object += " (deleted)"
				}
			}
			n := int(max(ev.Count, 1))
			if ev.Series != nil {
				n = max(n, int(ev.Series.Count))
			}
			events[evKey{object, ev.Type, ev.Reason, ev.Source.Component}] += n
		}
		for k, n := range events {
			v := fmt.Sprint(n)
			if timingDependent[k.reason] {
				v = "present"
			}
			out[fmt.Sprintf("Events of %s: %s %s from %s", k.object, k.typ, k.reason, k.source)] = v
		}
	}
	return out, pending, nil
}

func hasCondition(cs []appsv1.DeploymentCondition, typ string) bool {
	for _, c := range cs {
		if string(c.Type) == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func putDeployment(out flat, p string, d *appsv1.Deployment, n normaliser) {
	putMap(out, p+" annotation ", d.Annotations, n)
	out[p+" generation"] = fmt.Sprint(d.Generation)
	s := d.Status
	out[p+" status"] = fmt.Sprintf("observedGeneration=%d replicas=%d updated=%d ready=%d available=%d unavailable=%d terminating=%s collisionCount=%s",
		s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas, ptr(s.TerminatingReplicas), ptr(s.CollisionCount))
	for _, c := range s.Conditions {
		out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
	}
}

func putReplicaSet(out flat, p string, rs *appsv1.ReplicaSet, n normaliser) {
	out[p+" name"] = rs.Name
	putMap(out, p+" label ", rs.Labels, n)
	putMap(out, p+" annotation ", rs.Annotations, n)
	for _, ref := range rs.OwnerReferences {
		out[p+" owner "+ref.Kind+"/"+ref.Name] = fmt.Sprintf("controller=%s blockOwnerDeletion=%s", ptr(ref.Controller), ptr(ref.BlockOwnerDeletion))
	}
	s := rs.Status
	out[p+" spec.replicas"] = ptr(rs.Spec.Replicas)
	out[p+" status"] = fmt.Sprintf("replicas=%d fullyLabeled=%d ready=%d available=%d terminating=%s observedCurrent=%v",
		s.Replicas, s.FullyLabeledReplicas, s.ReadyReplicas, s.AvailableReplicas, ptr(s.TerminatingReplicas), s.ObservedGeneration >= rs.Generation)
	for _, c := range s.Conditions {
		out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
	}
}

func putMap(out flat, prefix string, m map[string]string, n normaliser) {
	for k, v := range m {
		out[prefix+k] = n.text(v)
	}
}

func ptr[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}
