package job

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The pod failure backoff: a Job whose pods failed n times in a row since its last
// success waits 10s·2^(n-1), at most 10 minutes, after its latest failure before it
// creates pods again (upstream's DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff).
const (
	podFailureBackoff    = 10 * time.Second
	maxPodFailureBackoff = 10 * time.Minute
)

// backoffRecord is one Job's failures since its last success. It lives in memory only:
// like a restarted kube-controller-manager, a shard that takes a namespace over starts
// with no records, counting only failures it sees from then on.
type backoffRecord struct {
	failuresAfterLastSuccess int32
	lastFailureTime          *time.Time
}

// backoffStore holds the records by Job key.
type backoffStore struct {
	mu      sync.Mutex
	records map[string]backoffRecord
}

func newBackoffStore() *backoffStore { return &backoffStore{records: map[string]backoffRecord{}} }

func (s *backoffStore) update(key string, r backoffRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[key] = r
}

func (s *backoffStore) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, key)
}

// next returns key's record updated with the newly finished pods (not yet stored): a
// success resets the count, failures after the latest success add to it.
func (s *backoffStore) next(key string, succeeded, failed []*corev1.Pod) backoffRecord {
	s.mu.Lock()
	r := s.records[key]
	s.mu.Unlock()
	sortByFinish(succeeded)
	sortByFinish(failed)
	if len(succeeded) == 0 {
		if len(failed) > 0 {
			r.failuresAfterLastSuccess += int32(len(failed))
			r.lastFailureTime = ptr.To(finishedAt(failed[len(failed)-1]))
		}
		return r
	}
	r = backoffRecord{}
	lastSuccess := finishedAt(succeeded[len(succeeded)-1])
	for i := len(failed) - 1; i >= 0; i-- {
		t := finishedAt(failed[i])
		if !t.After(lastSuccess) {
			break
		}
		if r.lastFailureTime == nil {
			r.lastFailureTime = &t
		}
		r.failuresAfterLastSuccess++
	}
	return r
}

func sortByFinish(pods []*corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return finishedAt(pods[i]).Before(finishedAt(pods[j])) })
}

// finishedAt is when a pod finished: its containers' (and restartable init containers')
// latest finish, else its Ready condition's turn to False, else its deletion timestamp
// less the grace period, else its creation.
func finishedAt(p *corev1.Pod) time.Time {
	if t := containersFinishedAt(p); t != nil {
		return *t
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if p.DeletionTimestamp != nil {
		return p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	return p.CreationTimestamp.Time
}

func containersFinishedAt(p *corev1.Pod) *time.Time {
	t, ok := latestFinish(nil, p.Status.ContainerStatuses, nil)
	if !ok {
		return nil
	}
	sidecars := sets.New[string]()
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.Insert(c.Name)
		}
	}
	t, ok = latestFinish(t, p.Status.InitContainerStatuses, sidecars)
	if !ok {
		return nil
	}
	return t
}

// latestFinish returns the latest finish among statuses (those named in only, when only
// is set), starting from prev; false when one of them has not terminated.
func latestFinish(prev *time.Time, statuses []corev1.ContainerStatus, only sets.Set[string]) (*time.Time, bool) {
	t := prev
	for _, cs := range statuses {
		if only != nil && !only.Has(cs.Name) {
			continue
		}
		term := cs.State.Terminated
		if term == nil || term.FinishedAt.IsZero() {
			return nil, false
		}
		if t == nil || t.Before(term.FinishedAt.Time) {
			t = &term.FinishedAt.Time
		}
	}
	return t, true
}

// remaining is how long the Job must still wait before creating pods.
func (r backoffRecord) remaining(clk clock.PassiveClock) time.Duration {
	return remainingBackoff(clk, r.failuresAfterLastSuccess, r.lastFailureTime)
}

// remainingForIndex is how long an index (backoffLimitPerIndex) must still wait after its
// latest failed pod.
func remainingForIndex(log klog.Logger, clk clock.PassiveClock, lastFailed *corev1.Pod) time.Duration {
	if lastFailed == nil {
		return 0
	}
	t := finishedAt(lastFailed)
	return remainingBackoff(clk, absoluteFailureCount(log, lastFailed)+1, &t)
}

func remainingBackoff(clk clock.PassiveClock, failures int32, last *time.Time) time.Duration {
	if failures == 0 {
		return 0
	}
	d := podFailureBackoff
	for i := 1; i < int(failures); i++ {
		d *= 2
		if d >= maxPodFailureBackoff {
			d = maxPodFailureBackoff
			break
		}
	}
	elapsed := clk.Since(*last)
	if d < elapsed {
		return 0
	}
	return d - elapsed
}
