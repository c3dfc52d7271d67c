package differential

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/metricsadapter"
)

// The horizontal pod autoscaler scenario, in one namespace, on each cluster's own metrics
// pipeline (hack/cluster.sh: the tests' metrics adapter serves external metrics from the
// ConfigMap "metrics", labelled metrics.test.kshard.io/external=true, and custom metrics
// from annotations). Both clusters sync every HPA every 15 s and hold scale-downs of HPAs
// without behavior for 5 min (kube-controller-manager's defaults, which the reference runs
// with and TestMain gives kshard's shards).
//
// Step 1 creates Deployments and, once they are complete, one HPA each:
//   - queue (1 pod): an External metric queue_length of 35 against an average of 10 per pod,
//     no behavior: scaled to 4;
//   - capped (1 pod, maxReplicas 3): External big of 100 against 10: scaled to 3,
//     ScalingLimited True TooManyReplicas;
//   - floored (3 pods, minReplicas 2, behavior with a scale-down window of 0): External
//     small of 1 against 10: scaled to 2, ScalingLimited True TooFewReplicas;
//   - object (1 pod): an Object metric requests of 30 (the Deployment's own annotation)
//     against an average of 10: scaled to 3;
//   - lost (2 pods): an External metric lost_metric nobody serves: ScalingActive False
//     FailedGetExternalMetric, the FailedGetExternalMetric and FailedComputeMetricsReplicas
//     warnings, the target left alone;
//   - notarget, whose target Deployment does not exist: AbleToScale False FailedGetScale and
//     the FailedGetScale warning.
//
// Step 2 gives queue a behavior (scale-down window 0, one pod per 600 s) and then drops
// queue_length to 5: queue wants 1 and is scaled to 3 (ScalingLimited True ScaleDownLimit,
// and held there: the policy's period outlasts the test); raises capped's maxReplicas to 5
// (scaled to 5, still TooManyReplicas); lowers floored's minReplicas to 1 (scaled to 1);
// and serves lost_metric at 20 (lost finds its metric, ScalingActive True, 2 pods kept).
// The spec changes come before the metric change: a spec change syncs an HPA at once,
// and no sync that writes a status can then be running when the patch lands (one that
// read the HPA before it would have its status write refused, a FailedUpdateStatus that
// depends on timing). Whether queue's first sync after the patch already sees the new
// metric or the next periodic one does, the outcome is the same.
//
// A step is done when every HPA has conditions and has observed its generation, every
// Deployment is complete, each HPA's status.currentReplicas equals its target's
// spec.replicas (the status of a sync after the last rescale, up to a sync period after
// it), the step's awaited counts and conditions are there, and nothing changed for 3 s.
//
// Compared: each HPA's currentReplicas and desiredReplicas, whether observedGeneration is
// current, whether lastScaleTime is set, currentMetrics (as the API returns them, namespace
// replaced), conditions by type and status with reason and message; each Deployment's
// spec.replicas and status counts; the events about HPAs per object, type, reason and
// source with their distinct messages. Normalised: lastTransitionTime and lastScaleTime
// are not compared as values (they are the sync's clock). The warnings an HPA repeats at
// every sync while its metric or target is missing (FailedGetScale,
// FailedGetExternalMetric, FailedComputeMetricsReplicas) are compared by presence and
// message, not count: how many syncs fall into a step depends on where each cluster's
// 15 s period happens to fall. The averages in currentMetrics are the metric divided by
// the target's status.replicas at the sync; the follow-up sync a step waits for comes a
// sync period after the rescale, when the Deployment has long counted its pods.

const (
	hpaNS = "hpa"
	// hpaMetricsCM is the ConfigMap the metrics adapter serves the namespace's external
	// metrics from.
	hpaMetricsCM = "metrics"
)

func TestDifferentialHPA(t *testing.T) {
	scenario{
		controllers: []string{"horizontalpodautoscaling", "deployment", "replicaset"},
		namespaces:  []string{hpaNS},
		steps:       hpaSteps,
		snapshot:    hpaSnapshot,
	}.run(t)
}

// hpaRepeated are the warnings an HPA repeats at every sync while its target or metric is
// missing: compared by presence, not count (see the scenario's comment).
var hpaRepeated = map[string]bool{"FailedGetScale": true, "FailedGetExternalMetric": true, "FailedComputeMetricsReplicas": true}

// hpaOf is an autoscaling/v2 HPA of the Deployment target with one metric.
func hpaOf(name, target string, minR, maxR int32, metric autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    kptr.To(minR), MaxReplicas: maxR,
			Metrics: []autoscalingv2.MetricSpec{metric},
		},
	}
}

// externalPerPod is a target of an average of perPod of the external metric name.
func externalPerPod(name, perPod string) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: kptr.To(resource.MustParse(perPod))}}}
}

// hpaObjects creates the Deployments and the metrics, waits until the Deployments are
// complete (so that each HPA's first sync reads a settled scale), then creates the HPAs.
func (s *side) hpaObjects(ctx context.Context) error {
	ns := s.ns[hpaNS]
	object := deployment("object", 1, "1", "0")
	object.Annotations = map[string]string{metricsadapter.Annotation("requests"): "30"}
	if err := s.createDeployments(ctx, hpaNS, deployment("queue", 1, "1", "0"), deployment("capped", 1, "1", "0"),
		deployment("floored", 3, "1", "0"), deployment("lost", 2, "1", "0"), object); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: hpaMetricsCM, Labels: map[string]string{metricsadapter.ExternalLabel: "true"}},
		Data: map[string]string{"queue_length": "35", "big": "100", "small": "1"}}
	if _, err := s.f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	err := pollCtx(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		deps, err := s.f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range deps.Items {
			if err := framework.DeploymentComplete(&deps.Items[i]); err != nil {
				return false, err
			}
		}
		return len(deps.Items) == 5, nil
	})
	if err != nil {
		return fmt.Errorf("the Deployments not complete: %w", err)
	}
	floored := hpaOf("floored", "floored", 2, 10, externalPerPod("small", "10"))
	floored.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: kptr.To[int32](0)}}
	objectMetric := autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "object"},
		Metric:          autoscalingv2.MetricIdentifier{Name: "requests"},
		Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: kptr.To(resource.MustParse("10"))}}}
	for _, h := range []*autoscalingv2.HorizontalPodAutoscaler{
		hpaOf("queue", "queue", 1, 10, externalPerPod("queue_length", "10")),
		hpaOf("capped", "capped", 1, 3, externalPerPod("big", "10")),
		floored,
		hpaOf("object", "object", 1, 10, objectMetric),
		hpaOf("lost", "lost", 1, 10, externalPerPod("lost_metric", "10")),
		hpaOf("notarget", "absent", 1, 10, externalPerPod("queue_length", "10")),
	} {
		if _, err := s.f.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, h, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating HPA %s: %w", h.Name, err)
		}
	}
	return nil
}

// hpaStatus is the snapshot path of an HPA's replica counts, awaited by the steps.
func hpaStatus(name string, current, desired int32) string {
	return fmt.Sprintf("HorizontalPodAutoscaler %s status currentReplicas=%d desiredReplicas=%d", name, current, desired)
}

var hpaSteps = []step{
	{name: "Deployments, metrics and HPAs", do: func(ctx context.Context, s *side) error { return s.hpaObjects(ctx) },
		awaits: []string{
			hpaStatus("queue", 4, 4), hpaStatus("capped", 3, 3), hpaStatus("floored", 2, 2), hpaStatus("object", 3, 3),
			"HorizontalPodAutoscaler lost condition ScalingActive False",
			"HorizontalPodAutoscaler notarget condition AbleToScale False",
			"Events of HorizontalPodAutoscaler queue: Normal SuccessfulRescale",
			"Events of HorizontalPodAutoscaler capped: Normal SuccessfulRescale",
			"Events of HorizontalPodAutoscaler floored: Normal SuccessfulRescale",
			"Events of HorizontalPodAutoscaler object: Normal SuccessfulRescale",
			"Events of HorizontalPodAutoscaler lost: Warning FailedGetExternalMetric",
			"Events of HorizontalPodAutoscaler lost: Warning FailedComputeMetricsReplicas",
			"Events of HorizontalPodAutoscaler notarget: Warning FailedGetScale",
		}},
	{name: "a behavior and a lower metric, maxReplicas and minReplicas changed, the missing metric served", do: func(ctx context.Context, s *side) error {
		ns := s.ns[hpaNS]
		hpas := s.f.Client.AutoscalingV2().HorizontalPodAutoscalers(ns)
		for _, p := range [][2]string{
			{"queue", `{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0,"policies":[{"type":"Pods","value":1,"periodSeconds":600}]}}}}`},
			{"capped", `{"spec":{"maxReplicas":5}}`},
			{"floored", `{"spec":{"minReplicas":1}}`},
		} {
			if err := mergePatch(ctx, hpas, p[0], p[1]); err != nil {
				return fmt.Errorf("patching HPA %s: %w", p[0], err)
			}
		}
		return mergePatch(ctx, s.f.Client.CoreV1().ConfigMaps(ns), hpaMetricsCM, `{"data":{"queue_length":"5","lost_metric":"20"}}`)
	}, awaits: []string{
		hpaStatus("queue", 3, 3), hpaStatus("capped", 5, 5), hpaStatus("floored", 1, 1), hpaStatus("lost", 2, 2),
		"HorizontalPodAutoscaler lost condition ScalingActive True",
	}},
}

// hpaSnapshot reads the namespace's HPAs, Deployments and the events about HPAs (see the
// scenario's comment for what is compared and when a step is done).
func hpaSnapshot(ctx context.Context, s *side) (view, error) {
	ns := s.ns[hpaNS]
	out := flat{}
	var pending notReady
	n := newNormaliser(s, nil, nil)
	hpas, err := s.f.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	deps, err := s.f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	specReplicas := map[string]int32{}
	for i := range deps.Items {
		d := &deps.Items[i]
		p := "Deployment " + d.Name
		specReplicas[d.Name] = kptr.Deref(d.Spec.Replicas, 1)
		out[p+" spec.replicas"] = ptr(d.Spec.Replicas)
		st := d.Status
		out[p+" status"] = fmt.Sprintf("replicas=%d updated=%d ready=%d available=%d", st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
		if err := framework.DeploymentComplete(d); err != nil {
			pending = append(pending, err.Error())
		}
	}
	for i := range hpas.Items {
		h := &hpas.Items[i]
		p := "HorizontalPodAutoscaler " + h.Name
		st := h.Status
		observed := "<nil>"
		if st.ObservedGeneration != nil {
			observed = fmt.Sprint(*st.ObservedGeneration == h.Generation)
			if *st.ObservedGeneration < h.Generation {
				pending = append(pending, p+": generation not observed")
			}
		}
		out[hpaStatus(h.Name, st.CurrentReplicas, st.DesiredReplicas)] = fmt.Sprintf("observedGeneration current=%s lastScaleTime set=%v",
			observed, st.LastScaleTime != nil)
		out[p+" currentMetrics"] = fmt.Sprint(len(st.CurrentMetrics))
		for j, m := range st.CurrentMetrics {
			b, err := json.Marshal(m)
			if err != nil {
				return view{}, err
			}
			out[fmt.Sprintf("%s currentMetrics[%d]", p, j)] = n.text(string(b))
		}
		for _, c := range st.Conditions {
			out[p+" condition "+string(c.Type)+" "+string(c.Status)] = c.Reason + ": " + n.text(c.Message)
		}
		if len(st.Conditions) == 0 {
			pending = append(pending, p+": not synced yet")
		}
		if want, ok := specReplicas[h.Spec.ScaleTargetRef.Name]; ok && st.CurrentReplicas != want {
			pending = append(pending, fmt.Sprintf("%s: currentReplicas %d, its target's spec.replicas %d", p, st.CurrentReplicas, want))
		}
	}
	evs, err := s.f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return view{}, err
	}
	events := &eventSet{withMessages: true, presenceOnly: hpaRepeated}
	for i := range evs.Items {
		ev := &evs.Items[i]
		if ev.InvolvedObject.Kind != "HorizontalPodAutoscaler" {
			continue
		}
		events.add("HorizontalPodAutoscaler "+ev.InvolvedObject.Name, ev, n.text)
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}
