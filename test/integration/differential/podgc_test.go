package differential

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"
)

// The pod garbage collector scenario, with two kwok nodes of each side's own, "stay" and
// "gone" (named after the side's namespace, tainted so that nothing else lands there).
// Step 1 creates, in one namespace: on gone, "orphan-run" (running, held by the test's
// finalizer), "orphan-free" (running, not held) and "orphan-failed" (held, failed by
// kwok); on stay, "stay-run"; never scheduled, "unscheduled" (held) and three terminated
// pods, "done-succeeded", "done-failed" and "done-evicted" (their status written as a
// kubelet would). Step 2 deletes node gone and the pod unscheduled: the collector marks
// the orphans that had not finished Failed with the DisruptionTarget condition
// (DeletionByPodGC) and deletes every orphan, and marks the unscheduled terminating pod
// Failed (no condition) and deletes it. The held pods stay to be read.
//
// The threshold: kube-controller-manager on both clusters runs without
// --terminated-pod-gc-threshold, i.e. upstream's default 12500, and the scenario cannot
// change the reference cluster's; kshard's shards are given the same 12500 explicitly.
// The three terminated pods, far below it, must be kept on both sides; deletion above the
// threshold is not compared here (test/integration/podgc checks it, with kshard alone).
//
// Compared: every pod of the namespace, present or gone, its phase and reason, whether it
// is being deleted and with which grace period, its finalizers, node (normalised), every
// condition's status, reason, message and observedGeneration, and status.observedGeneration.
//
// Orphans go only after upstream's fixed quarantine (40 s, checked at its 20 s pass: 40–80
// s after the node's deletion on the reference side; kshard runs with the same default
// quarantine), so step 2 takes about a minute.

const (
	podGCNS = "gc"
	// podGCTaint keeps the scenario's nodes to its own pods.
	podGCTaint = "kshard.io/diff-podgc"
)

func TestDifferentialPodGC(t *testing.T) {
	scenario{
		controllers: []string{"podgc"},
		namespaces:  []string{podGCNS},
		steps:       podGCSteps,
		// The orphans' quarantine: up to 80 s on the reference side.
		stepTimeout: 150 * time.Second,
		snapshot:    podGCSnapshot,
		cleanup:     podGCCleanup,
	}.run(t)
}

func (s *side) podGCNode(suffix string) string { return s.ns[podGCNS] + "-" + suffix }

// gcPod is a pod of the scenario: on names the node ("" for none: a scheduler that does
// not exist, so nobody binds it); held puts the test's finalizer on it.
func gcPod(name, on string, held bool, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: kptr.To[int64](30),
		Tolerations:                   []corev1.Toleration{{Key: podGCTaint, Operator: corev1.TolerationOpExists}},
		Containers:                    []corev1.Container{{Name: "app", Image: imageV1}},
	}}
	if on == "" {
		p.Spec.SchedulerName = "kshard-diff-nobody"
	} else {
		p.Spec.NodeName = on
	}
	if held {
		p.Finalizers = []string{holdFinalizer}
	}
	return p
}

var podGCSteps = []step{
	{name: "nodes stay and gone; orphans-to-be on gone, a pod on stay, an unscheduled pod and three terminated ones",
		do: func(ctx context.Context, s *side) error {
			cs, ns := s.f.Client, s.ns[podGCNS]
			taint := corev1.Taint{Key: podGCTaint, Effect: corev1.TaintEffectNoSchedule}
			for _, n := range []string{"stay", "gone"} {
				if err := s.kwokNode(ctx, s.podGCNode(n), nil, taint); err != nil {
					return err
				}
			}
			if err := pollCtx(ctx, defaultStepTimeout, func(ctx context.Context) (bool, error) {
				_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
				return err == nil, err
			}); err != nil {
				return fmt.Errorf("no default ServiceAccount: %w", err)
			}
			gone, stay := s.podGCNode("gone"), s.podGCNode("stay")
			for _, p := range []*corev1.Pod{
				gcPod("orphan-run", gone, true, nil),
				gcPod("orphan-free", gone, false, nil),
				gcPod("orphan-failed", gone, true, map[string]string{"kshard.io/kwok": "fail"}),
				gcPod("stay-run", stay, false, nil),
				gcPod("unscheduled", "", true, nil),
				gcPod("done-succeeded", "", false, nil),
				gcPod("done-failed", "", false, nil),
				gcPod("done-evicted", "", false, nil),
			} {
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			for name, st := range map[string]corev1.PodStatus{
				"done-succeeded": {Phase: corev1.PodSucceeded},
				"done-failed":    {Phase: corev1.PodFailed, Reason: "Error"},
				"done-evicted":   {Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
			} {
				p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status = st
				if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "node gone deleted, the unscheduled pod deleted", do: func(ctx context.Context, s *side) error {
		if err := s.deleteNodes(ctx, s.podGCNode("gone")); err != nil {
			return err
		}
		return s.f.Client.CoreV1().Pods(s.ns[podGCNS]).Delete(ctx, "unscheduled", metav1.DeleteOptions{})
	}},
}

// podGCCleanup lets the held pods go, deletes the namespace's pods (grace period 0: the
// nodes go next) and the scenario's nodes.
func podGCCleanup(ctx context.Context, s *side) error {
	cs, ns := s.f.Client, s.ns[podGCNS]
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if len(p.Finalizers) > 0 {
			if err := mergePatch(ctx, cs.CoreV1().Pods(ns), p.Name, `{"metadata":{"finalizers":null}}`); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: kptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		return err
	}
	return s.deleteNodes(ctx, s.podGCNode("stay"), s.podGCNode("gone"))
}

// podGCSnapshot reads the namespace's pods. A step is done when every pod bound to an
// existing node has left Pending (kwok runs it, or fails it), no pod bound to a missing
// node is not being deleted, and no pod being deleted has not finished (Succeeded or
// Failed): what the collector leaves when it is done.
func podGCSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	cs, ns := s.f.Client, s.ns[podGCNS]
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	nodes := map[string]bool{}
	for _, n := range []string{"stay", "gone"} {
		_, err := cs.CoreV1().Nodes().Get(ctx, s.podGCNode(n), metav1.GetOptions{})
		switch {
		case err == nil:
			nodes[s.podGCNode(n)] = true
		case !apierrors.IsNotFound(err):
			return view{}, err
		}
	}
	norm := newNormaliser(s, nil, nil)
	for _, name := range []string{"orphan-run", "orphan-free", "orphan-failed", "stay-run", "unscheduled", "done-succeeded", "done-failed", "done-evicted"} {
		out["Pod/"+name] = "gone"
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		pp := "Pod/" + p.Name
		out[pp] = "exists"
		out[pp+" node"] = norm.text(p.Spec.NodeName)
		out[pp+" phase"] = fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		out[pp+" status.observedGeneration"] = fmt.Sprintf("%d (generation %d)", p.Status.ObservedGeneration, p.Generation)
		if p.DeletionTimestamp != nil {
			out[pp] = fmt.Sprintf("deleting, grace period %s", ptr(p.DeletionGracePeriodSeconds))
		}
		if len(p.Finalizers) > 0 {
			out[pp+" finalizers"] = strings.Join(p.Finalizers, ",")
		}
		for _, c := range p.Status.Conditions {
			out[pp+" condition "+string(c.Type)] = fmt.Sprintf("%s %s %q observedGeneration=%d", c.Status, c.Reason, c.Message, c.ObservedGeneration)
		}
		finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		switch {
		case p.Spec.NodeName != "" && nodes[p.Spec.NodeName] && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending:
			pending = append(pending, pp+" not started")
		case p.Spec.NodeName != "" && !nodes[p.Spec.NodeName] && p.DeletionTimestamp == nil:
			pending = append(pending, pp+" on a node that is gone")
		case p.DeletionTimestamp != nil && !finished:
			pending = append(pending, pp+" being deleted, "+string(p.Status.Phase))
		}
		if p.Labels["kshard.io/kwok"] == "fail" && p.DeletionTimestamp == nil && !finished {
			pending = append(pending, pp+" not failed yet")
		}
	}
	sort.Strings(pending)
	return view{values: out, pending: pending}, nil
}
