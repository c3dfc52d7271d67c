package batch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// handoffJob is one Job of TestJobTrackingAcrossHandoff and the outcomes the test gave
// its pods.
type handoffJob struct {
	name                     string
	indexed                  bool
	parallelism, completions int32
	mu                       sync.Mutex
	finished                 int             // pods the driver ended
	failed, succeeded        map[string]bool // their UIDs, by planned outcome
}

// Jobs keep exact counts when their namespace is handed over from one shard to another
// while their pods are finishing: the old owner has counted some pods, is in the middle of
// others (a status write with uncountedTerminatedPods, finalizers removed, or not yet)
// when it releases the partition, and the new owner finishes them from what the objects
// say. The pods run until the test ends them (kwok label kshard.io/kwok=run; the test
// removes the label to make kwok succeed one, or sets it to "fail"), so the test decides
// which pods end before, during and after the move: a third of them before (counted by
// the old owner, checked), then one every 50ms while the owner gets SIGTERM and hands the
// namespace over, and on until every Job is complete. Checked: each Job Complete with
// exactly completions succeeded and exactly the pods the test failed counted as failed,
// no uncounted pods and no tracking finalizer left, every pod that succeeded counted
// (NonIndexed: succeeded pods = completions; Indexed: completedIndexes all, no index
// succeeded twice), and at every pod event no Job with more active pods than its
// parallelism. Not parallel: it changes the package's shard set (back to its size).
func TestJobTrackingAcrossHandoff(t *testing.T) {
	k := kshardOrSkip(t)
	e := newEnv(t)
	ctx := e.ctx()
	scaleOut(t, k) // the owner leaves below; the set keeps its size

	jobs := []*handoffJob{
		{name: "nonindexed", parallelism: 4, completions: 16},
		{name: "indexed", indexed: true, parallelism: 4, completions: 16},
		{name: "narrow", parallelism: 2, completions: 10},
		{name: "narrow-indexed", indexed: true, parallelism: 2, completions: 10},
	}
	par := map[string]int32{}
	byName := map[string]*handoffJob{}
	for _, j := range jobs {
		j.failed, j.succeeded = map[string]bool{}, map[string]bool{}
		par[j.name] = j.parallelism
		byName[j.name] = j
	}
	pw := startPodWatch(t, e.cs, e.ns, par)

	// Job status writes seen with pods in uncountedTerminatedPods, by time.
	var umu sync.Mutex
	var uncountedAt []time.Time
	jf := informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithNamespace(e.ns))
	ji := jf.Batch().V1().Jobs().Informer()
	if _, err := ji.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, cur any) {
		if u := cur.(*batchv1.Job).Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
			umu.Lock()
			uncountedAt = append(uncountedAt, time.Now())
			umu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stopJobs := make(chan struct{})
	defer close(stopJobs)
	jf.Start(stopJobs)

	for _, j := range jobs {
		opts := []jobOpt{running, func(job *batchv1.Job) { job.Spec.BackoffLimit = ptr.To[int32](100) }}
		if j.indexed {
			opts = append(opts, indexed)
		}
		e.create(newJob(j.name, j.parallelism, j.completions, opts...))
	}

	// finishOne ends one running pod of job j that the test has not ended yet: every
	// fourth one fails (exit code 1), the others succeed. It reports whether it found one.
	finishOne := func(j *handoffJob) bool {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.name + "," + kwokLabel + "=run"})
		if err != nil {
			return false
		}
		sort.Slice(pods.Items, func(a, b int) bool { return pods.Items[a].Name < pods.Items[b].Name })
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			j.mu.Lock()
			fail := j.finished%4 == 1
			j.mu.Unlock()
			patch := `{"metadata":{"labels":{"` + kwokLabel + `":null}}}`
			if fail {
				patch = `{"metadata":{"labels":{"` + kwokLabel + `":"fail"}}}`
			}
			if _, err := e.cs.CoreV1().Pods(e.ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				continue
			}
			j.mu.Lock()
			j.finished++
			if fail {
				j.failed[string(p.UID)] = true
			} else {
				j.succeeded[string(p.UID)] = true
			}
			j.mu.Unlock()
			return true
		}
		return false
	}
	counted := func(j *handoffJob) (succeeded, failed int) {
		j.mu.Lock()
		defer j.mu.Unlock()
		return len(j.succeeded), len(j.failed)
	}

	// Before the move: a third of each Job's pods end, counted by the namespace's owner.
	for _, j := range jobs {
		for i := 0; i < int(j.completions)/3; {
			if finishOne(j) {
				i++
				continue
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, j := range jobs {
		s, f := counted(j)
		e.waitJob(j.name, 60*time.Second, fmt.Sprintf("succeeded %d failed %d counted", s, f), func(job *batchv1.Job) bool {
			u := job.Status.UncountedTerminatedPods
			return int(job.Status.Succeeded) == s && int(job.Status.Failed) == f && (u == nil || len(u.Succeeded)+len(u.Failed) == 0)
		})
	}
	owner := k.StableOwner(t, e.ns)

	// The stream: one pod every 50ms, round robin over the Jobs not yet at completions.
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	streamDone := make(chan struct{})
	var duringMove, afterMove int
	var moving, moved time.Time
	var tmu sync.Mutex
	go func() {
		defer close(streamDone)
		for i := 0; streamCtx.Err() == nil; i++ {
			j := jobs[i%len(jobs)]
			if s, _ := counted(j); s < int(j.completions) && finishOne(j) {
				tmu.Lock()
				if !moved.IsZero() {
					afterMove++
				} else if !moving.IsZero() {
					duringMove++
				}
				tmu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	at := handOff(t, owner)
	tmu.Lock()
	moving = at
	tmu.Unlock()
	to, seen := waitHandedOver(t, k, e.ns, owner)
	tmu.Lock()
	moved = seen
	tmu.Unlock()
	t.Logf("namespace %s handed over %s → %s, seen owned by %s %s after SIGTERM", e.ns, owner.Name, to, to, seen.Sub(at).Round(time.Millisecond))

	for _, j := range jobs {
		e.waitJob(j.name, 120*time.Second, "Complete", func(job *batchv1.Job) bool { return hasCondition(job, batchv1.JobComplete) })
	}
	stopStream()
	<-streamDone
	umu.Lock()
	during := 0
	for _, u := range uncountedAt {
		if !u.Before(at) && !u.After(seen) {
			during++
		}
	}
	umu.Unlock()
	t.Logf("pods ended by the test while the namespace moved: %d, after: %d; Job status writes with uncounted pods seen while it moved: %d (of %d)", duringMove, afterMove, during, len(uncountedAt))
	if duringMove == 0 {
		t.Errorf("no pod ended while the namespace moved: the test did not hand over Jobs in the middle of their pods")
	}

	// Let any late write land before the final look.
	time.Sleep(2 * time.Second)
	for _, j := range jobs {
		job := e.job(j.name)
		s, f := counted(j)
		st := job.Status
		if st.Succeeded != j.completions || int(st.Failed) != f || s != int(j.completions) {
			t.Errorf("%s: status succeeded %d failed %d; the test ended %d pods as succeeded and %d as failed; want succeeded %d",
				j.name, st.Succeeded, st.Failed, s, f, j.completions)
		}
		if u := st.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
			t.Errorf("%s: uncounted %+v", j.name, u)
		}
		if st.Active != 0 || ptr.Deref(st.Ready, 0) != 0 {
			t.Errorf("%s: complete with active %d ready %d", j.name, st.Active, ptr.Deref(st.Ready, 0))
		}
		if j.indexed && st.CompletedIndexes != fmt.Sprintf("0-%d", j.completions-1) {
			t.Errorf("%s: completedIndexes %q", j.name, st.CompletedIndexes)
		}
		var podsSucceeded, podsFailed int
		for _, p := range e.pods(j.name) {
			switch p.Status.Phase {
			case corev1.PodSucceeded:
				podsSucceeded++
				if !j.succeeded[string(p.UID)] {
					t.Errorf("%s: pod %s succeeded, not by the test", j.name, p.Name)
				}
			case corev1.PodFailed:
				podsFailed++
				if !j.failed[string(p.UID)] {
					t.Errorf("%s: pod %s failed, not by the test", j.name, p.Name)
				}
			default:
				t.Errorf("%s: pod %s still %s after Complete", j.name, p.Name, p.Status.Phase)
			}
			for _, fin := range p.Finalizers {
				if fin == batchv1.JobTrackingFinalizer {
					t.Errorf("%s: pod %s still has the tracking finalizer", j.name, p.Name)
				}
			}
		}
		if podsSucceeded != s || podsFailed != f {
			t.Errorf("%s: %d pods succeeded and %d failed; the test ended %d and %d", j.name, podsSucceeded, podsFailed, s, f)
		}
		t.Logf("%s: succeeded %d failed %d (pods: %d succeeded, %d failed)", j.name, st.Succeeded, st.Failed, podsSucceeded, podsFailed)
	}
	pw.report(t)
}

// A CronJob whose schedule falls while its namespace is moving between shards runs
// exactly once: the test sends SIGTERM to the namespace's owner shortly before a whole
// minute, so that the schedule time falls while the owner drains and releases the
// partition and the new owner warms up and acquires it. The timer the old owner held
// is gone; the new owner must rebuild it from the CronJob (lastScheduleTime) and its Jobs.
// Checked: exactly one Job for that schedule time (the scheduled-timestamp annotation),
// no schedule time with two Jobs, lastScheduleTime at it, and no Job for a time before
// the CronJob was created. Not parallel: it changes the package's shard set.
func TestCronJobScheduleDuringHandoff(t *testing.T) {
	k := kshardOrSkip(t)
	e := newCronEnv(t)
	ctx := context.Background()
	scaleOut(t, k)

	// At least 15s before the next whole minute, so the owner has its timer set.
	cronWaitNextMinute(15 * time.Second)
	cj := e.createCronJob(newCronJob("every-minute", "* * * * *", func(cj *batchv1.CronJob) {
		cj.Spec.StartingDeadlineSeconds = ptr.To[int64](60)
		cj.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](10)
	}))
	created := cj.CreationTimestamp.Time
	boundary := time.Now().Truncate(time.Minute).Add(time.Minute)
	owner := k.StableOwner(t, e.ns)

	// SIGTERM just before the schedule time: the graceful hand-over takes longer than
	// this lead (drain, release, warm-up, acquire), so the time falls inside it.
	const lead = 300 * time.Millisecond
	time.Sleep(time.Until(boundary.Add(-lead)))
	at := handOff(t, owner)
	to, seen := waitHandedOver(t, k, e.ns, owner)
	t.Logf("namespace %s handed over %s → %s between %s and %s; schedule time %s",
		e.ns, owner.Name, to, at.Format("15:04:05.000"), seen.Format("15:04:05.000"), boundary.Format("15:04:05"))
	if !seen.After(boundary) {
		t.Logf("note: the hand-over was seen complete before the schedule time")
	}

	want := boundary.UTC().Format(time.RFC3339)
	var jobs []batchv1.Job
	e.eventually(60*time.Second, "a Job for "+want, func(ctx context.Context) error {
		var err error
		if jobs, err = e.jobsOf(ctx, cj.Name); err != nil {
			return err
		}
		for _, j := range jobs {
			if j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] == want {
				return nil
			}
		}
		return fmt.Errorf("jobs %v", cronJobNames(jobs))
	})
	// A second Job for the same time would come from a stale timer or an owner that did not
	// see the first: give it time to show up (less than the next minute).
	time.Sleep(time.Until(boundary.Add(30 * time.Second)))
	jobs, err := e.jobsOf(ctx, cj.Name)
	if err != nil {
		t.Fatal(err)
	}
	byTime := map[string][]string{}
	for _, j := range jobs {
		ts := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]
		byTime[ts] = append(byTime[ts], j.Name)
		if st, err := time.Parse(time.RFC3339, ts); err != nil || st.Before(created.Truncate(time.Minute)) {
			t.Errorf("job %s for %q: not a schedule time after the CronJob's creation at %s", j.Name, ts, created.Format(time.RFC3339))
		}
	}
	for ts, names := range byTime {
		if len(names) != 1 {
			t.Errorf("schedule time %s has %d Jobs: %v", ts, len(names), names)
		}
	}
	if len(byTime[want]) != 1 {
		t.Errorf("schedule time %s (inside the hand-over) has Jobs %v; want exactly one", want, byTime[want])
	}
	got, err := e.cronJob(ctx, cj.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.LastScheduleTime == nil || !got.Status.LastScheduleTime.Time.Equal(boundary) {
		t.Errorf("lastScheduleTime %v, want %s", got.Status.LastScheduleTime, want)
	}
	t.Logf("Jobs by schedule time: %v", byTime)
}
