package differential

import (
	"context"
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	kptr "k8s.io/utils/ptr"
)

// The PodDisruptionBudget scenario, in one namespace: a Deployment, a ReplicationController,
// bare pods and a pod owned by a ConfigMap (no scale subresource), created first and Ready,
// then one budget per case (maxUnavailable of the Deployment, a percentage minAvailable of
// the ReplicationController, a number minAvailable and a maxUnavailable of the bare pods,
// a budget selecting nothing, one of the ConfigMap's pod). Steps: create; scale the
// Deployment and report one ReplicationController pod not Ready; evict a bare pod through
// the eviction subresource and change a budget's spec. Compared: each budget's status
// (times removed: currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed, the
// number of disruptedPods, whether observedGeneration is current) and its DisruptionAllowed
// condition (status, reason, message normalised), the controller's events per object.
// Each pod is selected by one budget only: a pod selected by several wakes an arbitrary
// one of them (upstream's rule), which two runs need not choose alike.

const pdbNS = "pdb"

func TestDifferentialDisruption(t *testing.T) {
	scenario{
		controllers: []string{"disruption", "deployment", "replicaset", "replicationcontroller"},
		namespaces:  []string{pdbNS},
		steps:       pdbSteps(),
		snapshot:    pdbSnapshot,
	}.run(t)
}

func pdbLabels(app string) map[string]string { return map[string]string{"app": app} }

func pdbPod(name, app string, owner *metav1.OwnerReference) *corev1.Pod {
	p := orphanPod(name)
	p.Labels = pdbLabels(app)
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

func pdbBudget(name, app string, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1.PodDisruptionBudgetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: pdbLabels(app)}, MinAvailable: minAvailable, MaxUnavailable: maxUnavailable}}
}

func (s *side) pdbWorkloads(ctx context.Context) error {
	ns, cs := s.ns[pdbNS], s.f.Client
	d := deployment("dep", 3, "1", "0")
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: pdbLabels("dep")}
	d.Spec.Template.Labels = pdbLabels("dep")
	if err := s.createDeployments(ctx, pdbNS, d); err != nil {
		return err
	}
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pdbLabels("rc")}, Spec: orphanPod("x").Spec}
	if _, err := cs.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "rc"},
		Spec: corev1.ReplicationControllerSpec{Replicas: kptr.To[int32](2), Selector: pdbLabels("rc"), Template: &tpl}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cm, err := s.createCM(ctx, pdbNS, "owner", nil, nil)
	if err != nil {
		return err
	}
	for _, p := range []*corev1.Pod{pdbPod("bare-0", "bare", nil), pdbPod("bare-1", "bare", nil), pdbPod("bare-2", "bare", nil),
		pdbPod("lone-0", "lone", nil),
		pdbPod("cm-0", "cm", &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: kptr.To(true)})} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// The budgets come once every pod is Ready, so that each budget's own creation syncs it
	// with all of them.
	return pollCtx(ctx, defaultStepTimeout, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if podReady(&p) {
				n++
			}
		}
		return n == 3+2+5, fmt.Errorf("%d ready pods", n)
	})
}

func pdbSteps() []step {
	pct, num := intstr.FromString, intstr.FromInt32
	budgets := []*policyv1.PodDisruptionBudget{
		pdbBudget("dep", "dep", nil, kptr.To(num(1))),
		pdbBudget("rc", "rc", kptr.To(pct("50%")), nil),
		pdbBudget("bare-min", "bare", kptr.To(num(2)), nil),
		pdbBudget("lone-max", "lone", nil, kptr.To(pct("50%"))),
		pdbBudget("empty", "nothing", kptr.To(num(1)), nil),
		pdbBudget("cm", "cm", nil, kptr.To(num(1))),
	}
	var awaits []string
	for _, b := range budgets {
		awaits = append(awaits, "PodDisruptionBudget "+b.Name+" ")
	}
	return []step{
		{name: "workloads, then budgets", awaits: awaits, do: func(ctx context.Context, s *side) error {
			if err := s.pdbWorkloads(ctx); err != nil {
				return err
			}
			for _, b := range budgets {
				if _, err := s.f.Client.PolicyV1().PodDisruptionBudgets(s.ns[pdbNS]).Create(ctx, b.DeepCopy(), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "Deployment scaled, a ReplicationController pod not Ready", awaits: awaits, do: func(ctx context.Context, s *side) error {
			ns := s.ns[pdbNS]
			if err := mergePatch(ctx, s.f.Client.AppsV1().Deployments(ns), "dep", `{"spec":{"replicas":4}}`); err != nil {
				return err
			}
			pods, err := s.f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=rc"})
			if err != nil || len(pods.Items) == 0 {
				return fmt.Errorf("rc pods: %v (%d)", err, len(pods.Items))
			}
			sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := s.f.Client.CoreV1().Pods(ns).Get(ctx, pods.Items[0].Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == corev1.PodReady {
						p.Status.Conditions[i].Status = corev1.ConditionFalse
					}
				}
				_, err = s.f.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
		}},
		{name: "a bare pod evicted, a budget's spec changed", awaits: awaits, do: func(ctx context.Context, s *side) error {
			ns := s.ns[pdbNS]
			if err := s.f.Client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "bare-0", Namespace: ns}}); err != nil {
				return fmt.Errorf("evicting bare-0: %w", err)
			}
			return mergePatch(ctx, s.f.Client.PolicyV1().PodDisruptionBudgets(ns), "lone-max", `{"spec":{"maxUnavailable":"100%"}}`)
		}},
	}
}

// pdbSnapshot reads the budgets, the pods' phases and readiness, and the disruption
// controller's events. A step is done when every budget has its condition and has
// observed its generation (but the one that fails safe, whose condition keeps the last
// observed one), and no pod is Pending or terminating.
func pdbSnapshot(ctx context.Context, s *side) (view, error) {
	ns := s.ns[pdbNS]
	out := flat{}
	var pending notReady
	budgets, err := s.f.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	n := newNormaliser(s, []string{"dep", "rc"}, nil)
	for _, b := range budgets.Items {
		p := "PodDisruptionBudget " + b.Name + " "
		st := b.Status
		out[p+"status"] = fmt.Sprintf("currentHealthy=%d desiredHealthy=%d expectedPods=%d disruptionsAllowed=%d disruptedPods=%d",
			st.CurrentHealthy, st.DesiredHealthy, st.ExpectedPods, st.DisruptionsAllowed, len(st.DisruptedPods))
		out[p+"observedGeneration current"] = fmt.Sprint(st.ObservedGeneration == b.Generation)
		c := apimeta.FindStatusCondition(st.Conditions, policyv1.DisruptionAllowedCondition)
		if c == nil {
			pending = append(pending, p+"has no condition")
			continue
		}
		out[p+"condition"] = fmt.Sprintf("%s %s %q observedGeneration current=%v", c.Status, c.Reason, n.text(c.Message),
			c.ObservedGeneration == b.Generation)
		if c.Reason != policyv1.SyncFailedReason && st.ObservedGeneration != b.Generation {
			pending = append(pending, p+"generation not observed")
		}
	}
	pods, evs, err := s.podsAndEvents(ctx, ns)
	if err != nil {
		return view{}, err
	}
	counts := map[string]int{}
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil {
			pending = append(pending, "pod "+pod.Name+" pending or terminating")
		}
		owner := "none"
		if ref := metav1.GetControllerOf(&pod); ref != nil {
			owner = ref.Kind
		}
		counts[fmt.Sprintf("pods of app=%s owned by %s ready=%v", pod.Labels["app"], owner, podReady(&pod))]++
	}
	for k, v := range counts {
		out[k] = fmt.Sprint(v)
	}
	events := &eventSet{withMessages: true}
	for i := range evs {
		ev := &evs[i]
		if ev.Source.Component != "controllermanager" {
			continue
		}
		events.add(ev.InvolvedObject.Kind+" "+n.text(ev.InvolvedObject.Name), ev, n.text)
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}
