package job

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

const (
	// indexEnv is the variable every container of an Indexed Job's pod gets, read from the
	// pod's completion-index label.
	indexEnv = "JOB_COMPLETION_INDEX"
	// noIndex stands for a missing or unparseable completion index.
	noIndex = -1
	// maxGeneratedNameLength is the API server's limit on the generateName prefix it keeps
	// (63 characters minus the 5 random ones it appends).
	maxGeneratedNameLength = 58
)

func isIndexed(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
}

func hasBackoffLimitPerIndex(job *batchv1.Job) bool { return job.Spec.BackoffLimitPerIndex != nil }

// span is a closed range of completion indexes.
type span struct{ first, last int }

// indexSet is a sorted list of disjoint, non-adjacent spans: the form of
// status.completedIndexes and status.failedIndexes ("1,3-5,7").
type indexSet []span

// parseIndexes reads an index list, dropping indexes ≥ completions and skipping corrupt
// parts, as upstream reads status.completedIndexes.
func parseIndexes(log klog.Logger, s string, completions int) indexSet {
	if s == "" {
		return nil
	}
	var out indexSet
	for _, part := range strings.Split(s, ",") {
		bounds := strings.Split(part, "-")
		first, err := strconv.Atoi(bounds[0])
		if err != nil {
			log.Info("Corrupted indexes interval, ignoring", "interval", part, "err", err)
			continue
		}
		if first >= completions {
			break
		}
		last := first
		if len(bounds) > 1 {
			if last, err = strconv.Atoi(bounds[1]); err != nil {
				log.Info("Corrupted indexes interval, ignoring", "interval", part, "err", err)
				continue
			}
			last = min(last, completions-1)
		}
		if n := len(out); n > 0 && out[n-1].last == first-1 {
			out[n-1].last = last
		} else {
			out = append(out, span{first, last})
		}
	}
	return out
}

// with returns s with the sorted indexes added.
func (s indexSet) with(sorted []int) indexSet {
	add := make(indexSet, len(sorted))
	for i, ix := range sorted {
		add[i] = span{ix, ix}
	}
	return s.union(add)
}

// union merges two index sets.
func (s indexSet) union(o indexSet) indexSet {
	all := append(slices.Clone(s), o...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].first < all[j].first })
	var out indexSet
	for _, sp := range all {
		if n := len(out); n > 0 && sp.first <= out[n-1].last+1 {
			out[n-1].last = max(out[n-1].last, sp.last)
			continue
		}
		out = append(out, sp)
	}
	return out
}

func (s indexSet) total() int {
	n := 0
	for _, sp := range s {
		n += sp.last - sp.first + 1
	}
	return n
}

func (s indexSet) has(ix int) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i].last >= ix })
	return i < len(s) && s[i].first <= ix
}

// String writes the API's form: two adjacent indexes as "3,4", longer runs as "3-6".
func (s indexSet) String() string {
	var b strings.Builder
	for _, sp := range s {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sp.first))
		switch {
		case sp.last == sp.first+1:
			b.WriteString("," + strconv.Itoa(sp.last))
		case sp.last > sp.first:
			b.WriteString("-" + strconv.Itoa(sp.last))
		}
	}
	return b.String()
}

// completionIndex returns the pod's completion-index annotation, or noIndex.
func completionIndex(pod *corev1.Pod) int {
	v, ok := pod.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return noIndex
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return noIndex
	}
	return i
}

// validIndex reports whether pod carries an index below the Job's completions.
func validIndex(job *batchv1.Job, pod *corev1.Pod) bool {
	ix := completionIndex(pod)
	return ix != noIndex && ix < int(*job.Spec.Completions)
}

func indexesOf(pods []*corev1.Pod) sets.Set[int] {
	out := sets.New[int]()
	for _, p := range pods {
		if ix := completionIndex(p); ix != noIndex {
			out.Insert(ix)
		}
	}
	return out
}

// succeededIndexes returns the indexes the status already counts and those plus the
// indexes of succeeded pods still holding the tracking finalizer.
func succeededIndexes(log klog.Logger, job *batchv1.Job, pods []*corev1.Pod) (prev, now indexSet) {
	prev = parseIndexes(log, job.Status.CompletedIndexes, int(*job.Spec.Completions))
	found := sets.New[int]()
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded && validIndex(job, p) && hasTrackingFinalizer(p) {
			found.Insert(completionIndex(p))
		}
	}
	return prev, prev.with(sets.List(found))
}

// failedIndexes returns status.failedIndexes plus the indexes whose pods (still tracked)
// used up the index's backoff limit or matched a FailIndex rule.
func failedIndexes(log klog.Logger, job *batchv1.Job, pods []*corev1.Pod) indexSet {
	var prev indexSet
	if job.Status.FailedIndexes != nil {
		prev = parseIndexes(log, *job.Status.FailedIndexes, int(*job.Spec.Completions))
	}
	found := sets.New[int]()
	for _, p := range pods {
		if validIndex(job, p) && hasTrackingFinalizer(p) && indexFailed(log, job, p) {
			found.Insert(completionIndex(p))
		}
	}
	return prev.with(sets.List(found))
}

func indexFailed(log klog.Logger, job *batchv1.Job, pod *corev1.Pod) bool {
	if !isPodFailed(pod, job) {
		return false
	}
	counts := true
	if job.Spec.PodFailurePolicy != nil {
		m := matchFailurePolicy(job.Spec.PodFailurePolicy, pod)
		if m.action != nil && *m.action == batchv1.PodFailurePolicyActionFailIndex {
			return true
		}
		counts = m.counts
	}
	return counts && indexFailureCount(log, pod) >= *job.Spec.BackoffLimitPerIndex
}

// pendingIndexes returns up to count of the lowest indexes that have no active pod, have
// not succeeded nor failed (nor, with podReplacementPolicy Failed, a terminating pod).
func pendingIndexes(jc *syncContext, count int) []int {
	if count == 0 {
		return nil
	}
	completions := int(*jc.job.Spec.Completions)
	taken := jc.succeededIndexes.with(sets.List(indexesOf(jc.activePods)))
	if onlyReplaceFailed(jc.job) {
		taken = taken.with(sets.List(indexesOf(filterTerminating(jc.pods))))
	}
	if jc.failedIndexes != nil {
		taken = taken.union(*jc.failedIndexes)
	}
	out := make([]int, 0, count)
	for ix := 0; ix < completions && len(out) < count; ix++ {
		if !taken.has(ix) {
			out = append(out, ix)
		}
	}
	return out
}

// duplicatesForRemoval splits an Indexed Job's active pods into those to remove — pods
// without a valid index, and all but the best pod of an index (by activeOrder, the last
// stays) — and the rest.
func duplicatesForRemoval(pods []*corev1.Pod, completions int) (rm, keep []*corev1.Pod) {
	byIndex := map[int][]*corev1.Pod{}
	var order []int
	for _, p := range pods {
		ix := completionIndex(p)
		if ix == noIndex || ix >= completions {
			rm = append(rm, p)
			continue
		}
		if _, ok := byIndex[ix]; !ok {
			order = append(order, ix)
		}
		byIndex[ix] = append(byIndex[ix], p)
	}
	sort.Ints(order)
	for _, ix := range order {
		ps := byIndex[ix]
		if len(ps) > 1 {
			sort.Sort(activeOrder(ps))
			rm = append(rm, ps[:len(ps)-1]...)
		}
		keep = append(keep, ps[len(ps)-1])
	}
	return rm, keep
}

// delayedDeletionPerIndex returns, per index that is neither succeeded, failed nor active,
// its latest failed pod whose finalizer stays until the replacement is created: the
// replacement inherits its failure counts (backoffLimitPerIndex).
func delayedDeletionPerIndex(log klog.Logger, jc *syncContext) map[int]*corev1.Pod {
	active := indexesOf(jc.activePods)
	out := map[int]*corev1.Pod{}
	for _, p := range trackedPods(jc, nil) {
		if !isPodFailed(p, jc.job) {
			continue
		}
		ix := completionIndex(p)
		if jc.succeededIndexes.has(ix) || (jc.failedIndexes != nil && jc.failedIndexes.has(ix)) || active.Has(ix) {
			continue
		}
		last, ok := out[ix]
		if !ok || (absoluteFailureCount(log, last) <= absoluteFailureCount(log, p) && !finishedAt(p).Before(finishedAt(last))) {
			out[ix] = p
		}
	}
	return out
}

// newIndexFailureCounts returns the failure and ignored-failure counts a replacement of
// replaced inherits.
func newIndexFailureCounts(log klog.Logger, job *batchv1.Job, replaced *corev1.Pod) (failed, ignored int32) {
	if replaced == nil {
		return 0, 0
	}
	failed, ignored = indexFailureCount(log, replaced), ignoredFailureCount(replaced)
	if job.Spec.PodFailurePolicy == nil || matchFailurePolicy(job.Spec.PodFailurePolicy, replaced).counts {
		failed++
	} else {
		ignored++
	}
	return failed, ignored
}

func indexFailureCount(log klog.Logger, pod *corev1.Pod) int32 {
	v, ok := pod.Annotations[batchv1.JobIndexFailureCountAnnotation]
	if !ok {
		log.V(3).Info("There is no expected annotation", "annotationKey", batchv1.JobIndexFailureCountAnnotation,
			"pod", klog.KObj(pod), "podUID", pod.UID)
		return 0
	}
	return parseCount(v)
}

func ignoredFailureCount(pod *corev1.Pod) int32 {
	return parseCount(pod.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation])
}

func absoluteFailureCount(log klog.Logger, pod *corev1.Pod) int32 {
	return indexFailureCount(log, pod) + ignoredFailureCount(pod)
}

func parseCount(v string) int32 {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0
	}
	return int32(n)
}

// addIndexEnv gives every container the JOB_COMPLETION_INDEX variable, unless it has one.
func addIndexEnv(t *corev1.PodTemplateSpec) {
	ref := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.labels['%s']", batchv1.JobCompletionIndexAnnotation)}}
	add := func(c *corev1.Container) {
		if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == indexEnv }) {
			return
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: indexEnv, ValueFrom: ref.DeepCopy()})
	}
	for i := range t.Spec.InitContainers {
		add(&t.Spec.InitContainers[i])
	}
	for i := range t.Spec.Containers {
		add(&t.Spec.Containers[i])
	}
}

// setIndex writes the completion index into the template's annotation and label.
func setIndex(t *corev1.PodTemplateSpec, ix int) {
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(ix)
	t.Labels[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(ix)
}

// indexedGenerateName is "<job>-<index>-", the job name shortened so the prefix fits.
func indexedGenerateName(job string, ix int) string {
	suffix := "-" + strconv.Itoa(ix) + "-"
	p := job + suffix
	if len(p) > maxGeneratedNameLength {
		p = p[:maxGeneratedNameLength-len(suffix)] + suffix
	}
	return p
}
