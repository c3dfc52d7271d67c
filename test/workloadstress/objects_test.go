package workloadstress

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/workloadstress/invariant"
)

const (
	// runLabel marks the run's nodes, pod templates and budgets (value: the run ID).
	runLabel = "kshard.io/workload-stress"
	// appLabel selects a set's pods (StatefulSet and DaemonSet selectors, budgets).
	appLabel = "kshard.io/stress-app"
	image    = "registry.k8s.io/pause:3.10"
	// holdLabel exempts the run's pods from kwok's pod-delete stage (hack/kwok-stages): the
	// test ends terminating pods itself, as the kubelet does (kubelet below).
	holdLabel = "kshard.io/kwok-hold-deletion"
	// grace is the pods' terminationGracePeriodSeconds: the controllers delete with it,
	// where a forced delete uses 0 (invariant.Checker.Recreations tells them apart).
	grace = 30
)

// stsKind is one StatefulSet configuration of the mix; namespaces cycle through them.
type stsKind struct {
	name     string
	replicas int32
	// partition is the RollingUpdate partition during the rollouts; the last rollout sets
	// it to 0 so that every pod ends at the last template.
	partition int32
	mutate    func(*appsv1.StatefulSet)
}

func rollingSTS(maxUnavailable *intstr.IntOrString) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: maxUnavailable}}
	}
}

func parallel(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }

func minReady(n int32) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = n }
}

func chain(fns ...func(*appsv1.StatefulSet)) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		for _, f := range fns {
			f(s)
		}
	}
}

var stsKinds = []stsKind{
	{name: "ordered", replicas: 4, mutate: rollingSTS(nil)},
	{name: "ordered-partition", replicas: 5, partition: 2, mutate: rollingSTS(nil)},
	{name: "parallel-unavailable", replicas: 5, mutate: chain(parallel, rollingSTS(ptr.To(intstr.FromInt32(2))))},
	{name: "parallel-percent-partition", replicas: 4, partition: 1, mutate: chain(parallel, rollingSTS(ptr.To(intstr.FromString("50%"))))},
	{name: "ordered-unavailable", replicas: 4, mutate: chain(minReady(1), rollingSTS(ptr.To(intstr.FromInt32(2))))},
	{name: "parallel-min-ready", replicas: 3, mutate: chain(parallel, minReady(2), rollingSTS(nil))},
}

// pdbKind is one budget configuration; a budget toggles between its two specs.
type pdbKind struct {
	name string
	spec [2]policyv1.PodDisruptionBudgetSpec
}

func minAvailable(v intstr.IntOrString) policyv1.PodDisruptionBudgetSpec {
	return policyv1.PodDisruptionBudgetSpec{MinAvailable: &v}
}

func maxUnavailable(v intstr.IntOrString) policyv1.PodDisruptionBudgetSpec {
	return policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &v}
}

var pdbKinds = []pdbKind{
	{name: "min-number", spec: [2]policyv1.PodDisruptionBudgetSpec{minAvailable(intstr.FromInt32(2)), minAvailable(intstr.FromInt32(3))}},
	{name: "min-percent", spec: [2]policyv1.PodDisruptionBudgetSpec{minAvailable(intstr.FromString("50%")), minAvailable(intstr.FromString("75%"))}},
	{name: "max-number", spec: [2]policyv1.PodDisruptionBudgetSpec{maxUnavailable(intstr.FromInt32(1)), maxUnavailable(intstr.FromInt32(2))}},
	{name: "max-percent", spec: [2]policyv1.PodDisruptionBudgetSpec{maxUnavailable(intstr.FromString("25%")), maxUnavailable(intstr.FromString("50%"))}},
}

// dsKind is one DaemonSet configuration.
type dsKind struct {
	name                 string
	maxSurge, maxUnavail intstr.IntOrString
	minReady             int32
	// sequential: the next rollout starts once the previous one is complete, so that every
	// old pod is available when a rollout starts (the condition of upstream's surge bound;
	// see package invariant). Without surge, rollouts overlap.
	sequential bool
}

// dsKinds is the mix of DaemonSets. No surging one has minReadySeconds: upstream's
// controller (and kshard's, which does the same) can then stall a rollout for good, with
// every new pod Ready and no event left to wake the set (docs/controllers.md, "The
// DaemonSet controller"); with maxSurge 0 its status requeue keeps looking.
var dsKinds = []dsKind{
	{name: "surge-2", maxSurge: intstr.FromInt32(2), maxUnavail: intstr.FromInt32(0), sequential: true},
	{name: "unavailable-3", maxSurge: intstr.FromInt32(0), maxUnavail: intstr.FromInt32(3)},
	{name: "surge-10pct", maxSurge: intstr.FromString("10%"), maxUnavail: intstr.FromInt32(0), sequential: true},
	{name: "unavailable-20pct", maxSurge: intstr.FromInt32(0), maxUnavail: intstr.FromString("20%"), minReady: 1},
	{name: "surge-1", maxSurge: intstr.FromInt32(1), maxUnavail: intstr.FromInt32(0), sequential: true},
	{name: "unavailable-1", maxSurge: intstr.FromInt32(0), maxUnavail: intstr.FromInt32(1)},
}

func template(run, app string, gen int) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{runLabel: run, appLabel: app, holdLabel: "true", invariant.GenLabel: strconv.Itoa(gen)}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](grace),
			Containers: []corev1.Container{{Name: "app", Image: image}}},
	}
}

func newSTS(run, name string, k stsKind) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: run}},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(k.replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: name}},
			Template:    template(run, name, 1),
		},
	}
	k.mutate(s)
	if k.partition > 0 {
		s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(k.partition)
	}
	return s
}

func newDS(run, name string, k dsKind) *appsv1.DaemonSet {
	t := template(run, name, 1)
	t.Spec.NodeSelector = map[string]string{runLabel: run}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: run}},
		Spec: appsv1.DaemonSetSpec{
			Selector:        &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: name}},
			Template:        t,
			MinReadySeconds: k.minReady,
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: ptr.To(k.maxSurge), MaxUnavailable: ptr.To(k.maxUnavail)}},
		},
	}
}

func newPDB(run, ns, name, app string, spec policyv1.PodDisruptionBudgetSpec) *policyv1.PodDisruptionBudget {
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: app}}
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{runLabel: run}}, Spec: spec}
}

// patch applies a JSON merge patch (no conflicts with the controllers' status writes).
func mergePatch(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// genPatch sets a template's generation label (and, when partition is given, the
// StatefulSet's partition).
func genPatch(gen int, partition *int32) []byte {
	spec := map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{invariant.GenLabel: strconv.Itoa(gen)}}}}
	if partition != nil {
		spec["updateStrategy"] = map[string]any{"rollingUpdate": map[string]any{"partition": *partition}}
	}
	return mergePatch(map[string]any{"spec": spec})
}

func patchSTS(ctx context.Context, cs kubernetes.Interface, ns, name string, patch []byte) error {
	_, err := cs.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func patchDS(ctx context.Context, cs kubernetes.Interface, ns, name string, patch []byte) error {
	_, err := cs.AppsV1().DaemonSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// pdbSpecPatch replaces a budget's minAvailable/maxUnavailable with spec's.
func pdbSpecPatch(spec policyv1.PodDisruptionBudgetSpec) []byte {
	var minA, maxU any
	if spec.MinAvailable != nil {
		minA = spec.MinAvailable
	}
	if spec.MaxUnavailable != nil {
		maxU = spec.MaxUnavailable
	}
	return mergePatch(map[string]any{"spec": map[string]any{"minAvailable": minA, "maxUnavailable": maxU}})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stsDone says what keeps a StatefulSet from having rolled out to gen with the update
// revision current ("" when nothing): status exact and every pod of gen, Ready, at the
// update revision.
func stsDone(s *appsv1.StatefulSet, pods []corev1.Pod, gen int) string {
	n := ptr.Deref(s.Spec.Replicas, 1)
	st := s.Status
	if st.ObservedGeneration != s.Generation || st.Replicas != n || st.ReadyReplicas != n || st.AvailableReplicas != n ||
		st.UpdatedReplicas != n || st.CurrentReplicas != n || st.CurrentRevision != st.UpdateRevision || st.UpdateRevision == "" {
		return fmt.Sprintf("generation %d status %+v", s.Generation, st)
	}
	if s.Spec.Template.Labels[invariant.GenLabel] != strconv.Itoa(gen) {
		return fmt.Sprintf("template at generation %s, want %d", s.Spec.Template.Labels[invariant.GenLabel], gen)
	}
	if len(pods) != int(n) {
		return fmt.Sprintf("%d pods, want %d", len(pods), n)
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !podReady(&p) || p.Labels[invariant.GenLabel] != strconv.Itoa(gen) ||
			p.Labels[appsv1.ControllerRevisionHashLabelKey] != st.UpdateRevision {
			return fmt.Sprintf("pod %s: generation %s revision %s ready %v deleting %v", p.Name, p.Labels[invariant.GenLabel],
				p.Labels[appsv1.ControllerRevisionHashLabelKey], podReady(&p), p.DeletionTimestamp != nil)
		}
	}
	return ""
}

// dsDone says what keeps a DaemonSet from having rolled out on its nodes ("" when
// nothing): the status counts exact (the pods themselves are the checker's view).
func dsDone(d *appsv1.DaemonSet, nodes int32, gen int) string {
	st := d.Status
	if st.ObservedGeneration != d.Generation || st.DesiredNumberScheduled != nodes || st.CurrentNumberScheduled != nodes ||
		st.UpdatedNumberScheduled != nodes || st.NumberAvailable != nodes || st.NumberReady != nodes ||
		st.NumberMisscheduled != 0 || st.NumberUnavailable != 0 {
		return fmt.Sprintf("generation %d status %+v", d.Generation, st)
	}
	if d.Spec.Template.Labels[invariant.GenLabel] != strconv.Itoa(gen) {
		return fmt.Sprintf("template at generation %s, want %d", d.Spec.Template.Labels[invariant.GenLabel], gen)
	}
	return ""
}

// pdbDone says what keeps a budget's status from being the exact one for its StatefulSet
// of replicas Ready pods ("" when nothing).
func pdbDone(p *policyv1.PodDisruptionBudget, replicas int32) string {
	st := p.Status
	desired, err := invariant.DesiredHealthy(p.Spec, replicas)
	if err != nil {
		return err.Error()
	}
	allowed := max(0, replicas-desired)
	if st.ObservedGeneration != p.Generation || st.CurrentHealthy != replicas || st.ExpectedPods != replicas ||
		st.DesiredHealthy != desired || st.DisruptionsAllowed != allowed {
		return fmt.Sprintf("generation %d status %+v, want healthy %d expected %d desired %d allowed %d",
			p.Generation, st, replicas, replicas, desired, allowed)
	}
	return ""
}
