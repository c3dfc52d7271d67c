package differential

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kptr "k8s.io/utils/ptr"
)

// The DaemonSet scenario, on three kwok nodes of each side's own (cluster-scoped, named
// after the side's namespace, labelled kshard.io/diff-node=daemonset, which every set
// selects, so that no other node of the cluster takes part; deleted when the test ends):
// a (role worker), b (role worker, tainted dedicated=infra:NoSchedule) and c (role
// infra). DaemonSets:
//   - rolling: required node affinity on the scenario's nodes, tolerates the dedicated
//     taint: a, b and c. RollingUpdate, maxUnavailable 1.
//   - surge: required node affinity role In [worker] (and a preferred term, which the
//     controller's pin keeps), tolerates the dedicated taint: a and b. RollingUpdate,
//     maxSurge 1, maxUnavailable 0.
//   - ondelete: a node selector on the scenario's nodes, no toleration: a and c (b's
//     taint keeps it off). OnDelete.
//
// Steps: (1) nodes and DaemonSets created; (2) a new image in every set; (3) ondelete's
// pod on c deleted (replaced from the new template), c relabelled role worker (surge
// places a pod there); (4) a tainted NoSchedule, tolerated by none (each set's pod on a
// stays; no set is synced, see the step); (5) kubectl rollout undo of every set (revision
// 1 renumbered 3; rolling's update also deletes its old pod on a as one of its
// maxUnavailable replacements, surge's once more pods are available than desired, and no
// set places a pod on a again; ondelete replaces nothing, and its status now counts a's
// pod misscheduled).
//
// Compared: each set's status (every count, whether observedGeneration is current,
// collisionCount), annotations and conditions; each ControllerRevision (name with upstream's
// hash, number, labels, owner), described by set and image; each pod by set, node and
// revision (node name and the affinity the controller pins it with, node selector,
// tolerations, labels, owner, generateName, phase and readiness); the sets' events with
// their messages.

func TestDifferentialDaemonSet(t *testing.T) {
	scenario{
		controllers: []string{"daemonset"},
		namespaces:  []string{"main"},
		steps:       daemonSetSteps,
		snapshot:    daemonSetSnapshot,
		cleanup:     daemonSetCleanup,
	}.run(t)
}

const (
	// dsNodeLabel marks the scenario's nodes, with the value dsNodeTag gives.
	dsNodeLabel = "kshard.io/diff-node"
	// dsHoldTaint is the taint step 3 puts on node a, tolerated by no set.
	dsHoldTaint = "kshard.io/diff-hold"
)

// dsNode is the side's node of the scenario named suffix (a, b, c).
func (s *side) dsNode(suffix string) string { return s.ns["main"] + "-" + suffix }

// dsNodeTag is the value of dsNodeLabel on the side's nodes, which the sets' templates
// select: the same on both clusters, so that the templates, and with them the revision
// hashes, are equal. Upstream against itself (SelfCheckEnv) has both sides on one
// cluster: there each side's namespace keeps its sets off the other's nodes (and the
// hashes differ, which the snapshot then normalises).
func (s *side) dsNodeTag() string {
	if os.Getenv(SelfCheckEnv) == "1" {
		return s.ns["main"]
	}
	return "daemonset"
}

// kwokNode creates a node kwok manages (it reports it Ready and runs its pods) with the
// given labels and taints, and waits until it is Ready and the node lifecycle controller
// has removed the not-ready taint a new node is created with.
func (s *side) kwokNode(ctx context.Context, name string, labels map[string]string, taints ...corev1.Taint) error {
	// Scenarios run side by side: a scenario's nodes are for its own pods (bound by name,
	// or a DaemonSet's, which tolerate unschedulable nodes), not for the pods others leave
	// to the scheduler, which it would place on them (the volumes scenario's pods select
	// type=kwok and tolerate every taint) and which would be orphaned when the node goes.
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		l[k] = v
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Spec: corev1.NodeSpec{Taints: taints, Unschedulable: true},
	}
	if _, err := s.f.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return err
	}
	return pollCtx(ctx, defaultStepTimeout, func(ctx context.Context) (bool, error) {
		n, err := s.f.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, fmt.Errorf("node %s still tainted %s", name, t.Key)
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("node %s not Ready", name)
	})
}

// deleteNodes deletes the named nodes, those already gone aside.
func (s *side) deleteNodes(ctx context.Context, names ...string) error {
	for _, n := range names {
		if err := s.f.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %s: %w", n, err)
		}
	}
	return nil
}

func daemonSet(name string, strategy appsv1.DaemonSetUpdateStrategy, spec func(*corev1.PodSpec)) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"ds": name}},
			UpdateStrategy: strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"ds": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}},
					TerminationGracePeriodSeconds: new(int64)},
			},
		},
	}
	spec(&ds.Spec.Template.Spec)
	return ds
}

func rollingUpdate(surge, unavailable string) appsv1.DaemonSetUpdateStrategy {
	s, u := intstr.Parse(surge), intstr.Parse(unavailable)
	return appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &s, MaxUnavailable: &u}}
}

// dedicated is node b's taint.
var dedicated = corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}

func (s *side) daemonSets() []*appsv1.DaemonSet {
	tag := s.dsNodeTag()
	onScenarioNodes := corev1.NodeSelectorRequirement{Key: dsNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{tag}}
	tolerateDedicated := []corev1.Toleration{{Key: dedicated.Key, Operator: corev1.TolerationOpEqual, Value: dedicated.Value, Effect: dedicated.Effect}}
	return []*appsv1.DaemonSet{
		daemonSet("rolling", rollingUpdate("0", "1"), func(p *corev1.PodSpec) {
			p.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{onScenarioNodes}}}}}}
			p.Tolerations = tolerateDedicated
		}),
		daemonSet("surge", rollingUpdate("1", "0"), func(p *corev1.PodSpec) {
			p.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{onScenarioNodes,
						{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"worker"}}}}}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"infra"}}}}}},
			}}
			p.Tolerations = tolerateDedicated
		}),
		daemonSet("ondelete", appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}, func(p *corev1.PodSpec) {
			p.NodeSelector = map[string]string{dsNodeLabel: tag}
		}),
	}
}

func (s *side) patchDaemonSet(ctx context.Context, name, patch string) error {
	return mergePatch(ctx, s.f.Client.AppsV1().DaemonSets(s.ns["main"]), name, patch)
}

var daemonSetSteps = []step{
	{name: "nodes a, b (tainted), c and DaemonSets rolling, surge, ondelete created", do: func(ctx context.Context, s *side) error {
		ns := s.ns["main"]
		// Nodes a run killed before its cleanup left would take pods too: gone first.
		left, err := s.f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: dsNodeLabel + "=" + s.dsNodeTag()})
		if err != nil {
			return err
		}
		for _, n := range left.Items {
			if err := s.deleteNodes(ctx, n.Name); err != nil {
				return err
			}
		}
		for _, n := range []struct {
			suffix, role string
			taints       []corev1.Taint
		}{{"a", "worker", nil}, {"b", "worker", []corev1.Taint{dedicated}}, {"c", "infra", nil}} {
			if err := s.kwokNode(ctx, s.dsNode(n.suffix), map[string]string{dsNodeLabel: s.dsNodeTag(), "role": n.role}, n.taints...); err != nil {
				return err
			}
		}
		if err := pollCtx(ctx, defaultStepTimeout, func(ctx context.Context) (bool, error) {
			_, err := s.f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, err
		}); err != nil {
			return fmt.Errorf("no default ServiceAccount: %w", err)
		}
		for _, ds := range s.daemonSets() {
			if _, err := s.f.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "a new image in every DaemonSet", do: func(ctx context.Context, s *side) error {
		for _, name := range []string{"rolling", "surge", "ondelete"} {
			if err := s.patchDaemonSet(ctx, name, fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, imageV2)); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "ondelete's pod on c deleted, c relabelled role=worker",
		awaits: []string{"Pod surge on <ns:main>-c ", "Pod ondelete on <ns:main>-c ondelete@" + imageV2},
		do: func(ctx context.Context, s *side) error {
			cs, ns := s.f.Client, s.ns["main"]
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ds=ondelete"})
			if err != nil {
				return err
			}
			var victim string
			for _, p := range pods.Items {
				if p.Spec.NodeName == s.dsNode("c") {
					victim = p.Name
				}
			}
			if victim == "" {
				return fmt.Errorf("ondelete has no pod on %s", s.dsNode("c"))
			}
			if err := s.kubectl(ctx, "main", "delete", "pod/"+victim, "--wait=false"); err != nil {
				return err
			}
			return mergePatch(ctx, cs.CoreV1().Nodes(), s.dsNode("c"), `{"metadata":{"labels":{"role":"worker"}}}`)
		}},
	// Upstream queues a DaemonSet for a node's change only if the node should now get a
	// pod it lacks, must lose one it has, or the set already counts misscheduled pods: a
	// NoSchedule taint on a node whose pod may stay is none of these, so no set is synced
	// and every status stays as it was (desired still counting a) until the next sync for
	// another reason (the next step's). Compared as such: kshard must not sync either.
	{name: "node a tainted NoSchedule, tolerated by no set", do: func(ctx context.Context, s *side) error {
		cs := s.f.Client
		a, err := cs.CoreV1().Nodes().Get(ctx, s.dsNode("a"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		a.Spec.Taints = append(a.Spec.Taints, corev1.Taint{Key: dsHoldTaint, Effect: corev1.TaintEffectNoSchedule})
		_, err = cs.CoreV1().Nodes().Update(ctx, a, metav1.UpdateOptions{})
		return err
	}},
	{name: "kubectl rollout undo of every DaemonSet", do: func(ctx context.Context, s *side) error {
		for _, name := range []string{"rolling", "surge", "ondelete"} {
			if err := s.kubectl(ctx, "main", "rollout", "undo", "daemonset/"+name); err != nil {
				return err
			}
		}
		return nil
	}},
}

// daemonSetCleanup deletes the side's DaemonSets, then their pods (grace period 0: no
// kubelet is left to confirm), then the scenario's nodes.
func daemonSetCleanup(ctx context.Context, s *side) error {
	cs, ns := s.f.Client, s.ns["main"]
	if err := cs.AppsV1().DaemonSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: kptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		return err
	}
	return s.deleteNodes(ctx, s.dsNode("a"), s.dsNode("b"), s.dsNode("c"))
}

// daemonSetSnapshot reads and normalises the side's DaemonSets, revisions, pods and the
// sets' events. A step is done when every set has observed its generation, runs an
// available pod on every node it should (and a RollingUpdate set only pods of its newest
// revision, one per node), and no pod is being deleted or not yet running and ready.
func daemonSetSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	ns := s.ns["main"]
	sets, err := s.f.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	revs, err := s.f.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	pods, evs, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	// Upstream against itself: the sides' templates differ by their node tag, and so do
	// the hashes; each is replaced by the set and image of its revision.
	rename := map[string]string{}
	if os.Getenv(SelfCheckEnv) == "1" {
		for _, r := range revs.Items {
			if ref := metav1.GetControllerOf(&r); ref != nil {
				rename[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = "<hash of " + ref.Name + " " + fmt.Sprint(r.Revision) + ">"
			}
		}
	}
	norm := newNormaliser(s, []string{"rolling", "surge", "ondelete"}, rename)
	// byHash describes a revision by its set and the image of its template; newest is
	// each set's revision of the highest number.
	byHash := map[string]string{}
	newest := map[string]*appsv1.ControllerRevision{}
	for i := range revs.Items {
		r := &revs.Items[i]
		owner := "<none>"
		if ref := metav1.GetControllerOf(r); ref != nil {
			owner = ref.Name
		}
		image := "?"
		if i := strings.Index(string(r.Data.Raw), `"image":"`); i >= 0 {
			rest := string(r.Data.Raw)[i+len(`"image":"`):]
			image = rest[:strings.Index(rest, `"`)]
		}
		key := owner + "@" + image
		byHash[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = key
		if n := newest[owner]; n == nil || r.Revision > n.Revision {
			newest[owner] = r
		}
		p := "ControllerRevision " + key
		out[p+" name"] = norm.text(r.Name)
		out[p+" revision"] = fmt.Sprint(r.Revision)
		putMap(out, p+" label ", r.Labels, norm)
		putOwners(out, p, r.OwnerReferences, norm.text)
	}
	rolling := map[string]bool{}
	for i := range sets.Items {
		ds := &sets.Items[i]
		p := "DaemonSet " + ds.Name
		st := ds.Status
		out[p+" status"] = fmt.Sprintf("observedCurrent=%v desired=%d current=%d misscheduled=%d ready=%d available=%d unavailable=%d updated=%d collisionCount=%s",
			st.ObservedGeneration >= ds.Generation, st.DesiredNumberScheduled, st.CurrentNumberScheduled, st.NumberMisscheduled,
			st.NumberReady, st.NumberAvailable, st.NumberUnavailable, st.UpdatedNumberScheduled, ptr(st.CollisionCount))
		putMap(out, p+" annotation ", ds.Annotations, norm)
		for _, c := range st.Conditions {
			out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, norm.text(c.Message))
		}
		want := st.DesiredNumberScheduled
		switch {
		case st.ObservedGeneration < ds.Generation:
			pending = append(pending, p+": generation not observed")
		case st.CurrentNumberScheduled != want || st.NumberReady != want || st.NumberAvailable != want || st.NumberUnavailable != 0:
			pending = append(pending, fmt.Sprintf("%s: %d desired, %d scheduled, %d ready, %d available", p, want, st.CurrentNumberScheduled, st.NumberReady, st.NumberAvailable))
		case ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType && st.UpdatedNumberScheduled != want:
			pending = append(pending, fmt.Sprintf("%s: %d updated, want %d", p, st.UpdatedNumberScheduled, want))
		}
		if ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
			rolling[ds.Name] = true
		}
	}
	seen := map[string]int{}
	for i := range pods {
		pod := &pods[i]
		set := pod.Labels["ds"]
		if pod.DeletionTimestamp != nil {
			pending = append(pending, "pod "+pod.Name+" terminating")
			continue
		}
		rev := byHash[pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]]
		if rev == "" {
			rev = "?"
		}
		key := fmt.Sprintf("Pod %s on %s %s", set, norm.text(pod.Spec.NodeName), rev)
		if seen[key]++; seen[key] > 1 {
			key += fmt.Sprintf(" #%d", seen[key])
		}
		ready := false
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		if pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning || !ready {
			pending = append(pending, fmt.Sprintf("pod %s on %q: %s, ready %v", pod.Name, pod.Spec.NodeName, pod.Status.Phase, ready))
		}
		if n := newest[set]; rolling[set] && n != nil && pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != n.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] {
			pending = append(pending, fmt.Sprintf("pod %s of %s is of an old revision", pod.Name, set))
		}
		out[key+" phase"] = fmt.Sprintf("%s ready=%v", pod.Status.Phase, ready)
		out[key+" generateName"] = pod.GenerateName
		putMap(out, key+" label ", pod.Labels, norm)
		affinity, err := json.Marshal(pod.Spec.Affinity)
		if err != nil {
			return view{}, err
		}
		out[key+" affinity"] = norm.text(string(affinity))
		out[key+" nodeSelector"] = norm.text(fmt.Sprint(pod.Spec.NodeSelector))
		var tolerations []string
		for _, t := range pod.Spec.Tolerations {
			tolerations = append(tolerations, fmt.Sprintf("%s %s %s %s %s", t.Key, t.Operator, t.Value, t.Effect, ptr(t.TolerationSeconds)))
		}
		sort.Strings(tolerations)
		out[key+" tolerations"] = strings.Join(tolerations, "; ")
		putOwners(out, key, pod.OwnerReferences, norm.text)
	}
	events := eventSet{withMessages: true}
	for i := range evs {
		ev := &evs[i]
		if ev.InvolvedObject.Kind != "DaemonSet" {
			continue
		}
		events.add("DaemonSet "+ev.InvolvedObject.Name, ev, norm.text)
	}
	events.put(out)
	sort.Strings(pending)
	return view{values: out, pending: pending, events: events.lines}, nil
}
