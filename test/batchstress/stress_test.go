package batchstress

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	// stressLabel marks every pod template of the test (Jobs' and CronJobs'), for the pod watch.
	stressLabel = "kshard.io/batch-stress"
	// cronLabel names a CronJob on its Jobs.
	cronLabel = "kshard.io/batch-stress-cron"
	// kwok steering (hack/kwok-stages): "fail" fails a pod with the exit code annotation;
	// "by-index" fails an Indexed pod with the exit code annotation of its index, or
	// succeeds it when there is none.
	kwokLabel    = "kshard.io/kwok"
	exitCode     = "kshard.io/kwok-exit-code"
	exitCodeOfIx = "kshard.io/kwok-exit-code-"
	image        = "registry.k8s.io/pause:3.10"
)

// kind is one kind of Job of the mix: how to make it and what it must end as, computed
// from its spec and the outcomes kwok gives its pods.
type kind struct {
	name   string
	make   func(j *batchv1.Job)
	expect func(j *batchv1.Job) []string // problems with the finished Job
}

func exactly(what string, got, want int32) []string {
	if got != want {
		return []string{fmt.Sprintf("%s %d, want %d", what, got, want)}
	}
	return nil
}

func within(what string, got, lo, hi int32) []string {
	if got < lo || got > hi {
		return []string{fmt.Sprintf("%s %d, want %d..%d", what, got, lo, hi)}
	}
	return nil
}

func terminal(j *batchv1.Job, typ batchv1.JobConditionType, reason string) []string {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			if c.Type != typ || (reason != "" && c.Reason != reason) {
				return []string{fmt.Sprintf("ended %s/%s, want %s/%s", c.Type, c.Reason, typ, reason)}
			}
			return nil
		}
	}
	return []string{"no terminal condition"}
}

func str(what, got, want string) []string {
	if got != want {
		return []string{fmt.Sprintf("%s %q, want %q", what, got, want)}
	}
	return nil
}

func sizes(par, comp int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Spec.Parallelism, j.Spec.Completions = ptr.To(par), ptr.To(comp) }
}

func indexedMode(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }

// failIndexes makes kwok fail the pods of the given indexes with code (every attempt).
func failIndexes(code int, idx ...int) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.Template.Labels[kwokLabel] = "by-index"
		for _, i := range idx {
			j.Spec.Template.Annotations[fmt.Sprintf("%s%d", exitCodeOfIx, i)] = fmt.Sprint(code)
		}
	}
}

func failAll(code int) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.Template.Labels[kwokLabel] = "fail"
		j.Spec.Template.Annotations[exitCode] = fmt.Sprint(code)
	}
}

func onExitCode(action batchv1.PodFailurePolicyAction, code int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: action,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{code}},
		}}}
	}
}

func apply(opts ...func(*batchv1.Job)) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		for _, o := range opts {
			o(j)
		}
	}
}

// kinds is the mix; Jobs cycle through it.
var kinds = []kind{
	{name: "ok", make: sizes(3, 6), expect: func(j *batchv1.Job) []string {
		return join(terminal(j, batchv1.JobComplete, ""), exactly("succeeded", j.Status.Succeeded, 6), exactly("failed", j.Status.Failed, 0))
	}},
	{name: "ok-indexed", make: apply(sizes(3, 6), indexedMode), expect: func(j *batchv1.Job) []string {
		return join(terminal(j, batchv1.JobComplete, ""), exactly("succeeded", j.Status.Succeeded, 6), exactly("failed", j.Status.Failed, 0),
			str("completedIndexes", j.Status.CompletedIndexes, "0-5"))
	}},
	// Every pod fails; backoffLimit 1: Failed once 2 have failed (both of the first
	// two may fail at once, and an active pod deleted on failure counts as failed).
	{name: "backoff", make: apply(sizes(2, 4), failAll(1), func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](1) }),
		expect: func(j *batchv1.Job) []string {
			return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded), exactly("succeeded", j.Status.Succeeded, 0),
				within("failed", j.Status.Failed, 2, 3))
		}},
	// Every pod exits 42, which the policy makes fail the Job at the first failure.
	{name: "pfp-failjob", make: apply(sizes(2, 4), indexedMode, failAll(42), onExitCode(batchv1.PodFailurePolicyActionFailJob, 42)),
		expect: func(j *batchv1.Job) []string {
			return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy), exactly("succeeded", j.Status.Succeeded, 0),
				within("failed", j.Status.Failed, 1, 2))
		}},
	// Indexes 1 and 4 fail every attempt; one retry per index: each fails twice.
	{name: "per-index", make: apply(sizes(3, 6), indexedMode, failIndexes(1, 1, 4), func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](1)
		j.Spec.BackoffLimit = nil
	}), expect: func(j *batchv1.Job) []string {
		return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonFailedIndexes), exactly("succeeded", j.Status.Succeeded, 4),
			exactly("failed", j.Status.Failed, 4), str("failedIndexes", ptr.Deref(j.Status.FailedIndexes, ""), "1,4"),
			str("completedIndexes", j.Status.CompletedIndexes, "0,2,3,5"))
	}},
	// Index 2 exits 42, which the policy turns into a failed index at once.
	{name: "pfp-failindex", make: apply(sizes(3, 6), indexedMode, failIndexes(42, 2), onExitCode(batchv1.PodFailurePolicyActionFailIndex, 42),
		func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To[int32](3); j.Spec.BackoffLimit = nil }),
		expect: func(j *batchv1.Job) []string {
			return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonFailedIndexes), exactly("succeeded", j.Status.Succeeded, 5),
				exactly("failed", j.Status.Failed, 1), str("failedIndexes", ptr.Deref(j.Status.FailedIndexes, ""), "2"),
				str("completedIndexes", j.Status.CompletedIndexes, "0,1,3-5"))
		}},
	// Indexes 0 and 3 fail without retries; one failed index is allowed.
	{name: "max-failed", make: apply(sizes(2, 4), indexedMode, failIndexes(1, 0, 3), func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
		j.Spec.MaxFailedIndexes = ptr.To[int32](1)
		j.Spec.BackoffLimit = nil
	}), expect: func(j *batchv1.Job) []string {
		return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonMaxFailedIndexesExceeded), within("succeeded", j.Status.Succeeded, 0, 2),
			within("failed", j.Status.Failed, 2, 3))
	}},
	// Index 0 fails every attempt under the Job-wide backoffLimit 2: its third failure
	// (after 10s and 20s of pod backoff, which holds back every index's pods) fails the
	// Job. Each other index has succeeded by then or has its active pod deleted, which
	// counts as failed: succeeded + failed = 5 + 3, and the succeeded are the completed
	// indexes, none of them index 0.
	{name: "global-backoff", make: apply(sizes(3, 6), indexedMode, failIndexes(1, 0), func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](2) }),
		expect: func(j *batchv1.Job) []string {
			st := j.Status
			return join(terminal(j, batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded), exactly("succeeded+failed", st.Succeeded+st.Failed, 8),
				within("failed", st.Failed, 3, 5), exactly("completed indexes", indexCount(st.CompletedIndexes), st.Succeeded),
				noIndexZero(st.CompletedIndexes))
		}},
}

// indexCount counts the indexes of a completedIndexes value ("1,3-5" has 4).
func indexCount(s string) int32 {
	var n int32
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		var lo, hi int32
		if _, err := fmt.Sscanf(part, "%d-%d", &lo, &hi); err == nil {
			n += hi - lo + 1
		} else {
			n++
		}
	}
	return n
}

func noIndexZero(completed string) []string {
	if completed == "0" || strings.HasPrefix(completed, "0,") || strings.HasPrefix(completed, "0-") {
		return []string{fmt.Sprintf("completedIndexes %q has index 0, whose every pod fails", completed)}
	}
	return nil
}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func newJob(name, run string, k kind) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kind": k.name}},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{stressLabel: run}, Annotations: map[string]string{}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: image}}},
			},
		},
	}
	k.make(j)
	return j
}

// podWatch follows every pod of the run: active pods per Job (checked against the Job's
// parallelism at every event) and succeeded pods per completion index.
type podWatch struct {
	mu          sync.Mutex
	parallelism map[string]int32           // ns/job → parallelism (CronJobs' Jobs: 1)
	active      map[string]map[string]bool // ns/job → active pod UIDs
	maxActive   map[string]int             // ns/job → most active pods seen
	succeeded   map[string]map[string]bool // ns/job/index → succeeded pod UIDs
	violations  []string
	events      int
	unknown     int // events of a pod whose Job the test did not know yet
}

func (w *podWatch) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			p, _ = d.Obj.(*corev1.Pod)
		}
	}
	if p == nil {
		return
	}
	job := p.Namespace + "/" + p.Labels[batchv1.JobNameLabel]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if w.active[job] == nil {
		w.active[job] = map[string]bool{}
	}
	uid := string(p.UID)
	gone := p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if gone {
		delete(w.active[job], uid)
	} else {
		w.active[job][uid] = true
	}
	n := len(w.active[job])
	w.maxActive[job] = max(w.maxActive[job], n)
	par, known := w.parallelism[job]
	if !known {
		w.unknown++
	} else if n > int(par) {
		w.violations = append(w.violations, fmt.Sprintf("%s: %d active pods > parallelism %d at %s", job, n, par, time.Now().Format("15:04:05.000")))
	}
	if idx, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ok && p.Status.Phase == corev1.PodSucceeded {
		key := job + "/" + idx
		if w.succeeded[key] == nil {
			w.succeeded[key] = map[string]bool{}
		}
		if !w.succeeded[key][uid] {
			w.succeeded[key][uid] = true
			if len(w.succeeded[key]) > 1 {
				w.violations = append(w.violations, fmt.Sprintf("index %s succeeded %d times at %s", key, len(w.succeeded[key]), time.Now().Format("15:04:05.000")))
			}
		}
	}
}

func (w *podWatch) onDelete(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			p, _ = d.Obj.(*corev1.Pod)
		}
	}
	if p == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	delete(w.active[p.Namespace+"/"+p.Labels[batchv1.JobNameLabel]], string(p.UID))
}

func TestBatchStress(t *testing.T) {
	if os.Getenv("KSHARD_BATCH_STRESS") != "1" {
		t.Skip("the batch stress test runs with KSHARD_BATCH_STRESS=1 (make batch-stress)")
	}
	f := framework.Get(t)
	for _, c := range []string{"job", "cronjob"} {
		if on, err := f.KCMRuns(c); err != nil || on {
			t.Fatalf("the cluster's kube-controller-manager runs %s (%v): the stress test needs kshard to run it alone", c, err)
		}
	}
	nJobs := framework.EnvInt("KSHARD_BATCH_STRESS_JOBS", 304)
	nCron := framework.EnvInt("KSHARD_BATCH_STRESS_CRONJOBS", 30)
	waves := framework.EnvInt("KSHARD_BATCH_STRESS_WAVES", 8)
	const waveGap = 30 * time.Second
	ctx := context.Background()
	cs := f.LoadClient(t)
	run := f.RunID
	began := time.Now()

	// The longest the test process went without running a 1s ticker: a stall of the
	// machine (a shared one) freezes the control plane and kshard alike, and CronJob
	// schedule times that fall in a stall longer than startingDeadlineSeconds are
	// skipped, as upstream skips them. Reported with the results.
	reportStall := framework.WatchStalls(t)

	k := f.NewKShard(t, framework.KShardOptions{ShardArgs: []string{"--controllers", "job,cronjob,ttl-after-finished"}})
	k.GuardAlone(t)
	// Two coordinators, as the chart runs them, restarted when one exits (as its
	// Deployment would): on a loaded machine the leader can miss its Lease renewal (renew
	// deadline 3s here), and it then exits on purpose.
	stopSupervising := k.SuperviseCoordinators(t)
	defer stopSupervising()
	for i := 1; i <= 3; i++ {
		k.StartShard(fmt.Sprintf("shard-%d", i))
	}
	k.WaitAllOwned(t, 90*time.Second)
	t.Logf("3 shards own every partition after %s", time.Since(began).Round(time.Second))
	// After the shards start: they run the serviceaccount controller (the cluster's
	// kube-controller-manager does not), without which no pod is admitted.
	checkKwokStage(t, f)

	w := &podWatch{parallelism: map[string]int32{}, active: map[string]map[string]bool{}, maxActive: map[string]int{},
		succeeded: map[string]map[string]bool{}}
	// CronJobs' Jobs, as they appear: name → scheduled time.
	var cmu sync.Mutex
	cronRuns := map[string]map[string][]string{} // ns/cronjob → scheduled time → Job names
	var cronLate []time.Duration                 // each CronJob Job's creation after its schedule time (whole seconds)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = stressLabel + "=" + run }))
	podInf := factory.Core().V1().Pods().Informer()
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: w.observe,
		UpdateFunc: func(_, cur any) { w.observe(cur) }, DeleteFunc: w.onDelete}); err != nil {
		t.Fatal(err)
	}
	cronFactory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cronLabel }))
	jobInf := cronFactory.Batch().V1().Jobs().Informer()
	if _, err := jobInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		j := obj.(*batchv1.Job)
		key := j.Namespace + "/" + j.Labels[cronLabel]
		ts := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]
		w.mu.Lock()
		w.parallelism[j.Namespace+"/"+j.Name] = ptr.Deref(j.Spec.Parallelism, 1)
		w.mu.Unlock()
		cmu.Lock()
		defer cmu.Unlock()
		if cronRuns[key] == nil {
			cronRuns[key] = map[string][]string{}
		}
		if !contains(cronRuns[key][ts], j.Name) {
			cronRuns[key][ts] = append(cronRuns[key][ts], j.Name)
			if at, err := time.Parse(time.RFC3339, ts); err == nil {
				late := j.CreationTimestamp.Sub(at)
				cronLate = append(cronLate, late)
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	cronFactory.Start(stop)
	factory.WaitForCacheSync(stop)
	cronFactory.WaitForCacheSync(stop)

	// Namespaces: one per CronJob; the Jobs are spread over them.
	nss := make([]string, nCron)
	if err := framework.Parallel(nCron, 8, func(i int) error {
		nss[i] = f.Namespace(t, nil).Name
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	policies := []batchv1.ConcurrencyPolicy{batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent}
	cronCreated := map[string]time.Time{}
	for i, ns := range nss {
		name := fmt.Sprintf("every-minute-%d", i)
		cj := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.CronJobSpec{
				Schedule:                   "* * * * *",
				ConcurrencyPolicy:          policies[i%len(policies)],
				StartingDeadlineSeconds:    ptr.To[int64](45),
				SuccessfulJobsHistoryLimit: ptr.To[int32](30),
				FailedJobsHistoryLimit:     ptr.To[int32](30),
				JobTemplate: batchv1.JobTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cronLabel: name}},
					Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{stressLabel: run}},
						Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
							Containers: []corev1.Container{{Name: "c", Image: image}}}}},
				},
			},
		}
		out, err := cs.BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cronCreated[ns+"/"+name] = out.CreationTimestamp.Time
	}

	// The Jobs, in waves; the faults, between them.
	type jobRef struct {
		ns, name string
		kind     kind
	}
	jobs := make([]jobRef, nJobs)
	for i := range jobs {
		kd := kinds[i%len(kinds)]
		jobs[i] = jobRef{ns: nss[(i/len(kinds)+i)%len(nss)], name: fmt.Sprintf("%s-%d", kd.name, i), kind: kd}
		j := newJob(jobs[i].name, run, kd)
		w.mu.Lock()
		w.parallelism[jobs[i].ns+"/"+jobs[i].name] = ptr.Deref(j.Spec.Parallelism, 1)
		w.mu.Unlock()
	}
	start := time.Now()
	faults := map[int]func(){
		1: func() {
			s := k.StartShard("shard-4")
			k.WaitAllOwned(t, 90*time.Second)
			framework.WaitHTTP(t, s.HTTPURL+"/readyz", 60*time.Second)
			t.Logf("+%s scaled out to 4 shards", time.Since(start).Round(time.Second))
		},
		3: func() {
			k.ScaleIn(t, "shard-1")
			t.Logf("+%s scaled in to 3 shards (shard-1 handed over and exited)", time.Since(start).Round(time.Second))
		},
		5: func() {
			s := k.Shards["shard-2"]
			if err := s.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_, _ = s.Wait(10 * time.Second)
			t.Logf("+%s SIGKILLed shard-2", time.Since(start).Round(time.Second))
			k.WaitOwnsNothing(t, "shard-2")
			t.Logf("+%s its partitions owned by the 2 live shards", time.Since(start).Round(time.Second))
			s5 := k.StartShard("shard-5")
			k.WaitAllOwned(t, 90*time.Second)
			framework.WaitHTTP(t, s5.HTTPURL+"/readyz", 60*time.Second)
			t.Logf("+%s replacement shard-5 joined: 3 shards", time.Since(start).Round(time.Second))
		},
	}
	var faultWG sync.WaitGroup
	perWave := (nJobs + waves - 1) / waves
	for wv := 0; wv < waves; wv++ {
		at := start.Add(time.Duration(wv) * waveGap)
		time.Sleep(time.Until(at))
		lo, hi := wv*perWave, min(nJobs, (wv+1)*perWave)
		if err := framework.Parallel(hi-lo, 8, func(i int) error {
			r := jobs[lo+i]
			_, err := cs.BatchV1().Jobs(r.ns).Create(ctx, newJob(r.name, run, r.kind), metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatalf("creating wave %d: %v", wv, err)
		}
		t.Logf("+%s wave %d: Jobs %d..%d created", time.Since(start).Round(time.Second), wv, lo, hi-1)
		if fn, ok := faults[wv]; ok {
			faultWG.Add(1)
			go func() {
				defer faultWG.Done()
				// Halfway to the next wave, so the Jobs just created are in flight.
				time.Sleep(waveGap / 2)
				fn()
			}()
		}
	}
	faultWG.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Every Job ends.
	deadline := time.Now().Add(8 * time.Minute)
	var pending []string
	for {
		pending = pending[:0]
		for _, r := range jobs {
			j, err := cs.BatchV1().Jobs(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil || !finished(j) {
				pending = append(pending, r.ns+"/"+r.name)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	t.Logf("+%s %d of %d Jobs finished", time.Since(start).Round(time.Second), nJobs-len(pending), nJobs)
	for _, p := range pending[:min(20, len(pending))] {
		t.Errorf("Job %s did not finish", p)
	}

	// Let the CronJobs run one more whole minute past the faults, then check every
	// schedule time from each one's creation to the last whole minute 30s ago.
	lastBoundary := time.Now().Add(-30 * time.Second).Truncate(time.Minute)
	if time.Since(start) < 8*time.Minute {
		time.Sleep(time.Until(start.Add(8 * time.Minute)))
		lastBoundary = time.Now().Add(-30 * time.Second).Truncate(time.Minute)
	}
	time.Sleep(5 * time.Second) // the last Jobs' watch events

	// Job outcomes.
	byKind := map[string][2]int{}
	problems := 0
	for _, r := range jobs {
		j, err := cs.BatchV1().Jobs(r.ns).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s/%s: %v", r.ns, r.name, err)
			continue
		}
		ps := r.kind.expect(j)
		if u := j.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
			ps = append(ps, fmt.Sprintf("uncounted pods left %+v", u))
		}
		c := byKind[r.kind.name]
		c[0]++
		if len(ps) > 0 {
			c[1]++
			problems++
			if problems <= 30 {
				t.Errorf("%s/%s (%s): %s; status %s", r.ns, r.name, r.kind.name, strings.Join(ps, "; "), statusLine(j))
			}
		}
		byKind[r.kind.name] = c
	}
	var kindNames []string
	for n := range byKind {
		kindNames = append(kindNames, n)
	}
	sort.Strings(kindNames)
	var kindLine []string
	for _, n := range kindNames {
		kindLine = append(kindLine, fmt.Sprintf("%s %d (%d wrong)", n, byKind[n][0], byKind[n][1]))
	}
	t.Logf("Jobs by kind: %s", strings.Join(kindLine, ", "))

	// Tracking finalizers left on terminal pods.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: stressLabel + "=" + run})
	if err != nil {
		t.Fatal(err)
	}
	withFinalizer := 0
	for _, p := range pods.Items {
		if (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) && contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
			withFinalizer++
		}
	}
	if withFinalizer > 0 {
		t.Errorf("%d terminal pods still carry %s", withFinalizer, batchv1.JobTrackingFinalizer)
	}

	// CronJob runs: exactly one Job per schedule time in the window.
	cmu.Lock()
	runs := 0
	for key, created := range cronCreated {
		first := created.Truncate(time.Minute).Add(time.Minute)
		for b := first; !b.After(lastBoundary); b = b.Add(time.Minute) {
			ts := b.UTC().Format(time.RFC3339)
			names := cronRuns[key][ts]
			if len(names) != 1 {
				t.Errorf("CronJob %s: schedule time %s has %d Jobs %v, want 1", key, ts, len(names), names)
			}
			runs += len(names)
		}
		for ts, names := range cronRuns[key] {
			b, err := time.Parse(time.RFC3339, ts)
			if err != nil || b.Before(first) || (b.After(lastBoundary) && len(names) > 1) {
				t.Errorf("CronJob %s: Jobs %v for %q outside its schedule", key, names, ts)
			}
		}
	}
	cmu.Unlock()
	sort.Slice(cronLate, func(a, b int) bool { return cronLate[a] < cronLate[b] })
	late := func(q float64) time.Duration {
		if len(cronLate) == 0 {
			return 0
		}
		return cronLate[min(len(cronLate)-1, int(q*float64(len(cronLate))))]
	}
	t.Logf("CronJobs: %d, schedule times checked up to %s, %d runs; Job created after its schedule time: p50 %s, p99 %s, max %s",
		nCron, lastBoundary.Format("15:04:05"), runs, late(0.5), late(0.99), late(1))

	w.mu.Lock()
	maxOver := 0
	for job, n := range w.maxActive {
		if p, ok := w.parallelism[job]; ok && n-int(p) > maxOver {
			maxOver = n - int(p)
		}
	}
	t.Logf("pod watch: %d events over %d pods; %d events of pods of a Job not yet known; %d violations (max excess over parallelism %d); %d indexes succeeded",
		w.events, len(pods.Items), w.unknown, len(w.violations), maxOver, len(w.succeeded))
	for _, v := range w.violations[:min(30, len(w.violations))] {
		t.Error(v)
	}
	w.mu.Unlock()
	reportStall()
	t.Logf("total %s", time.Since(began).Round(time.Second))
}

func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func statusLine(j *batchv1.Job) string {
	var conds []string
	for _, c := range j.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("active %d succeeded %d failed %d completed %q failedIndexes %q conditions %v",
		j.Status.Active, j.Status.Succeeded, j.Status.Failed, j.Status.CompletedIndexes, ptr.Deref(j.Status.FailedIndexes, ""), conds)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// checkKwokStage fails the test early when the control plane's kwok predates the
// pod-outcome-by-index stage (kwok reads its stages when it starts): a pod planned to fail
// with exit code 7 must fail with it.
func checkKwokStage(t *testing.T, f *framework.Framework) {
	t.Helper()
	ns := f.Namespace(t, nil).Name
	f.WaitDefaultServiceAccount(t, ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-stage-probe", Labels: map[string]string{kwokLabel: "by-index"},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "0", exitCodeOfIx + "0": "7"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: image}}},
	}
	if _, err := f.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "kwok's pod-outcome-by-index stage fails a probe pod with exit code 7 (restart the control plane if kwok started before hack/kwok-stages/pod-outcome-by-index.yaml existed)",
		func(ctx context.Context) (bool, error) {
			p, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Terminated != nil && c.State.Terminated.ExitCode == 7 && p.Status.Phase == corev1.PodFailed {
					return true, nil
				}
			}
			return false, fmt.Errorf("probe pod %s", p.Status.Phase)
		})
}
