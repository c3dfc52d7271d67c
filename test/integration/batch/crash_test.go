package batch

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/job"
	"github.com/kshard/kshard/test/framework"
)

// crashNode is the node of the pods TestJobCountsAfterCrash makes: no kubelet and no kwok
// node, so nothing but the test and the Job controller touches them.
const crashNode = "kshard-e2e-no-such-node"

// A shard killed in the middle of counting a Job's pods leaves the Job in one of the
// states the tracking protocol allows; the next owner must finish counting from the
// objects alone, every pod exactly once. The test writes such a state on the real control
// plane (a Job of spec.managedBy kshard.io/job-controller, which no controller works until
// the test starts a kshard that does): one pod counted before the crash; one succeeded and
// one failed pod whose finalizers were removed but whose move from
// uncountedTerminatedPods into the counters was never written (the crash between
// finalizer removal and status write); one succeeded pod listed in
// uncountedTerminatedPods still holding its finalizer (a crash between the status write
// and the finalizer removal); one succeeded pod not yet listed (a crash before the status
// write). Then a kshard with --job-managed-by=kshard.io/job-controller takes over: the Job
// completes with succeeded 4 and failed 1, nothing uncounted, no finalizer left and no
// pod created.
func TestJobCountsAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	j := e.create(newJob("crashed", 4, 4, running, func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To(job.ManagedByKShard) }))

	type podPlan struct {
		name      string
		phase     corev1.PodPhase
		finalizer bool
	}
	plans := []podPlan{
		{"counted", corev1.PodSucceeded, false},
		{"removed", corev1.PodSucceeded, false},
		{"removed-failed", corev1.PodFailed, false},
		{"listed", corev1.PodSucceeded, true},
		{"unlisted", corev1.PodSucceeded, true},
	}
	uid := map[string]types.UID{}
	framework.Get(t).WaitDefaultServiceAccount(t, e.ns) // the test creates the pods itself
	for _, pl := range plans {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "crashed-" + pl.name, Labels: j.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: *j.Spec.Template.Spec.DeepCopy(),
		}
		p.Spec.NodeName = crashNode
		if pl.finalizer {
			p.Finalizers = []string{batchv1.JobTrackingFinalizer}
		}
		created, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		code := int32(0)
		if pl.phase == corev1.PodFailed {
			code = 1
		}
		setTerminated(created, pl.phase, code)
		if _, err := e.cs.CoreV1().Pods(e.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		uid[pl.name] = created.UID
	}
	j.Status = batchv1.JobStatus{
		StartTime: ptr.To(metav1.Now()), Succeeded: 1, Active: 0, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{
			Succeeded: []types.UID{uid["removed"], uid["listed"]},
			Failed:    []types.UID{uid["removed-failed"]},
		},
	}
	if _, err := e.cs.BatchV1().Jobs(e.ns).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the crashed shard's status: %v", err)
	}

	k := e.f.NewKShard(t, framework.KShardOptions{ShardArgs: []string{"--controllers", "job", "--" + job.ManagedByFlag, job.ManagedByKShard}})
	k.StartCoordinator("crash-coordinator")
	s := k.StartShard("crash-shard")
	framework.WaitHTTP(t, s.HTTPURL+"/readyz", 90*time.Second)
	got := e.waitFinished("crashed", "complete", "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	st := got.Status
	if st.Succeeded != 4 || st.Failed != 1 {
		t.Errorf("succeeded %d failed %d, want 4 and 1: each pod counted once", st.Succeeded, st.Failed)
	}
	if u := st.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		t.Errorf("uncounted %+v", u)
	}
	pods := e.pods("crashed")
	if len(pods) != len(plans) {
		t.Errorf("pods %v: want only the %d the test made", podStates(pods), len(plans))
	}
	for _, p := range pods {
		if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
			t.Errorf("pod %s keeps the tracking finalizer", p.Name)
		}
	}
	e.waitReasons("crashed", map[string]int{"Normal Completed": 1, "Normal SuccessfulCreate": 0})
}
