package replicacalc

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelpers "k8s.io/component-helpers/resource"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// podGroups sorts a target's pods for a metric: ready is the number of pods whose sample
// counts; unready pods' samples are dropped (they count as using nothing on a scale-up);
// missing pods have no sample; ignored pods (being deleted, or Failed) do not count at all.
type podGroups struct {
	ready   int
	unready sets.Set[string]
	missing sets.Set[string]
	ignored sets.Set[string]
}

// groupPods sorts pods by metrics (resource is the metric's resource, empty for a custom
// metric) and removes the samples of ignored and unready pods from metrics.
//
// Pods being deleted and Failed pods are ignored; Pending pods are unready; a pod without
// a sample is missing. For CPU only, a pod is also unready when it has no Ready condition
// or no start time; while it is within the CPU initialization period of its start, when
// it is not ready or its sample was taken less than a metric window after its readiness
// last changed; after that period, when it is not ready and its readiness last changed
// within the initial readiness delay of its start (it has never been ready).
func (c *Calculator) groupPods(pods []*corev1.Pod, metrics PodMetricsInfo, resource corev1.ResourceName) podGroups {
	g := podGroups{unready: sets.New[string](), missing: sets.New[string](), ignored: sets.New[string]()}
	now := c.clock.Now()
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			g.ignored.Insert(pod.Name)
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			g.unready.Insert(pod.Name)
			continue
		}
		sample, ok := metrics[pod.Name]
		if !ok {
			g.missing.Insert(pod.Name)
			continue
		}
		if resource == corev1.ResourceCPU && c.cpuSampleUnready(pod, sample, now) {
			g.unready.Insert(pod.Name)
			continue
		}
		g.ready++
	}
	for pod := range g.ignored {
		delete(metrics, pod)
	}
	for pod := range g.unready {
		delete(metrics, pod)
	}
	return g
}

// cpuSampleUnready reports whether pod's CPU sample must not count at now (see groupPods).
func (c *Calculator) cpuSampleUnready(pod *corev1.Pod, sample PodMetric, now time.Time) bool {
	ready := podutil.ReadyCondition(pod)
	if ready == nil || pod.Status.StartTime == nil {
		return true
	}
	start := pod.Status.StartTime.Time
	if start.Add(c.cpuInitializationPeriod).After(now) {
		return ready.Status == corev1.ConditionFalse || sample.Timestamp.Before(ready.LastTransitionTime.Add(sample.Window))
	}
	return ready.Status == corev1.ConditionFalse && start.Add(c.initialReadinessDelay).After(ready.LastTransitionTime.Time)
}

// calculateRequests returns each pod's request of resource in milli-units: the named
// container's when container is not empty; else the pod-level request when the pod sets
// pod-level requests (PodLevelResources, on by default in 1.37), else the sum over its
// containers and restartable (sidecar) init containers. A container without the request,
// or a pod without the named container, is an error.
func calculateRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	requests := make(map[string]int64, len(pods))
	for _, pod := range pods {
		var (
			req int64
			err error
		)
		if container == "" && resourcehelpers.IsPodLevelRequestsSet(pod) {
			req, err = podLevelRequest(pod, resource)
		} else {
			req, err = containerRequests(pod, container, resource)
		}
		if err != nil {
			return nil, err
		}
		requests[pod.Name] = req
	}
	return requests, nil
}

// podLevelRequest is pod's effective request of resource with pod-level requests set.
func podLevelRequest(pod *corev1.Pod, resource corev1.ResourceName) (int64, error) {
	q, ok := resourcehelpers.PodRequests(pod, resourcehelpers.PodResourcesOptions{})[resource]
	if !ok {
		return 0, fmt.Errorf("missing pod-level request for %s in Pod %s", resource, pod.Name)
	}
	return q.MilliValue(), nil
}

// containerRequests sums the requests of resource of pod's containers and restartable
// init containers, or returns the request of the one named container.
func containerRequests(pod *corev1.Pod, container string, resource corev1.ResourceName) (int64, error) {
	containers := append([]corev1.Container{}, pod.Spec.Containers...)
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	var sum int64
	for _, c := range containers {
		if container == "" || container == c.Name {
			q, ok := c.Resources.Requests[resource]
			if !ok {
				return 0, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, c.Name, pod.Name)
			}
			sum += q.MilliValue()
		}
		if container == c.Name {
			return sum, nil
		}
	}
	if container != "" {
		return 0, fmt.Errorf("container %s not found in Pod %s", container, pod.Name)
	}
	return sum, nil
}
