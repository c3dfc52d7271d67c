package differential

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kptr "k8s.io/utils/ptr"
)

// The batch scenario: Jobs of every kind kwok can drive (hack/kwok-stages: a Job pod
// succeeds at once, one labelled kshard.io/kwok=fail fails with the exit code of its
// annotation, one labelled kshard.io/kwok=run keeps running until the test relabels it) and
// a CronJob on a one-minute schedule. Jobs are keyed by name (a scheduled Job's by its
// CronJob and the minutes between the CronJob's creation and its schedule), their pods
// compared as a multiset of normalised descriptions per Job.

const (
	batchImage = "registry.k8s.io/pause:3.10"
	// kwokLabel steers kwok: "fail" fails the pod, any other value keeps it running, none
	// lets it succeed.
	kwokLabel          = "kshard.io/kwok"
	exitCodeAnnotation = "kshard.io/kwok-exit-code"
	indexLabel         = batchv1.JobCompletionIndexAnnotation
)

func TestDifferentialBatch(t *testing.T) {
	scenario{
		controllers: []string{"job", "cronjob", "ttl-after-finished"},
		namespaces:  []string{"batch"},
		steps:       batchSteps(),
		// The first step waits for the CronJob's first scheduled run (up to a minute
		// after its creation), the second for its next schedule.
		stepTimeout: 150 * time.Second,
		snapshot:    batchSnapshot,
	}.run(t)
}

// batchJob is a Job of pause pods that kwok runs as its label kwok says (none: they
// succeed at once).
func batchJob(name string, parallelism, completions int32, kwok string) *batchv1.Job {
	labels := map[string]string{}
	if kwok != "" {
		labels[kwokLabel] = kwok
	}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: batchImage}}},
	}
	spec := batchv1.JobSpec{Parallelism: &parallelism, Completions: &completions, Template: template}
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// batchSteps returns the scenario's steps.
func batchSteps() []step {
	return []step{
		{name: "create Jobs (Indexed with a pod failure policy, failing with backoff, to be suspended, with a success policy, with a TTL, past its deadline) and CronJobs (Forbid with history 1, Replace)", do: func(ctx context.Context, s *side) error {
			idx := batchJob("indexed", 4, 4, "run")
			idx.Spec.CompletionMode = kptr.To(batchv1.IndexedCompletion)
			idx.Spec.BackoffLimitPerIndex = kptr.To[int32](1)
			idx.Spec.MaxFailedIndexes = kptr.To[int32](2)
			idx.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: kptr.To("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
					{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			}}
			backoff := batchJob("backoff", 1, 1, "fail")
			backoff.Spec.Template.Annotations[exitCodeAnnotation] = "3"
			backoff.Spec.BackoffLimit = kptr.To[int32](2)
			success := batchJob("success", 5, 5, "run")
			success.Spec.CompletionMode = kptr.To(batchv1.IndexedCompletion)
			success.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
				{SucceededIndexes: kptr.To("0-2"), SucceededCount: kptr.To[int32](2)}}}
			ttl := batchJob("ttl", 1, 1, "run")
			ttl.Spec.TTLSecondsAfterFinished = kptr.To[int32](2)
			deadline := batchJob("deadline", 2, 2, "run")
			deadline.Spec.ActiveDeadlineSeconds = kptr.To[int64](5)
			for _, j := range []*batchv1.Job{idx, backoff, batchJob("suspend", 2, 2, "run"), success, ttl, deadline} {
				if _, err := s.f.Client.BatchV1().Jobs(s.ns["batch"]).Create(ctx, j, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("creating Job %s: %w", j.Name, err)
				}
			}
			// Both sides create the CronJob at one instant at least 5 s before a minute ends (from
			// the step's start, which they share), so that both schedule in the same minutes.
			at := s.stepStarted
			if at.Second() >= 55 {
				at = at.Truncate(time.Minute).Add(time.Minute + time.Second)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(at)):
			}
			template := batchJob("", 1, 1, "run")
			forbid := &batchv1.CronJob{
				ObjectMeta: metav1.ObjectMeta{Name: "cron"},
				Spec: batchv1.CronJobSpec{
					Schedule:                   "* * * * *",
					ConcurrencyPolicy:          batchv1.ForbidConcurrent,
					SuccessfulJobsHistoryLimit: kptr.To[int32](1),
					FailedJobsHistoryLimit:     kptr.To[int32](1),
					JobTemplate:                batchv1.JobTemplateSpec{Spec: template.Spec},
				},
			}
			replace := forbid.DeepCopy()
			replace.Name, replace.Spec.ConcurrencyPolicy = "replace", batchv1.ReplaceConcurrent
			replace.Spec.SuccessfulJobsHistoryLimit, replace.Spec.FailedJobsHistoryLimit = nil, nil
			for _, cj := range []*batchv1.CronJob{forbid, replace} {
				if _, err := s.f.Client.BatchV1().CronJobs(s.ns["batch"]).Create(ctx, cj, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("creating CronJob %s: %w", cj.Name, err)
				}
			}
			return nil
		}, awaits: []string{"CronJob batch/cron lastScheduleTime", "CronJob batch/replace lastScheduleTime"}},
		{name: "Indexed: index 0 succeeds, 1 fails with exit code 42 (FailIndex), 2 is disrupted (Ignore), 3 fails (counted); suspend a running Job; two indexes meet the success policy; the CronJobs' next schedule finds their Jobs running (Forbid: not started; Replace: replaced)", do: func(ctx context.Context, s *side) error {
			pods, err := s.jobPods(ctx, "indexed")
			if err != nil {
				return err
			}
			for _, p := range pods {
				var err error
				switch p.Labels[indexLabel] {
				case "0":
					err = s.succeedPod(ctx, p.Name)
				case "1":
					err = s.failPod(ctx, p.Name, 42)
				case "2":
					err = s.disruptPod(ctx, p.Name)
				case "3":
					err = s.failPod(ctx, p.Name, 1)
				}
				if err != nil {
					return err
				}
			}
			if err := mergePatch(ctx, s.f.Client.BatchV1().Jobs(s.ns["batch"]), "suspend", `{"spec":{"suspend":true}}`); err != nil {
				return err
			}
			pods, err = s.jobPods(ctx, "success")
			if err != nil {
				return err
			}
			for _, p := range pods {
				if i := p.Labels[indexLabel]; i == "0" || i == "2" {
					if err := s.succeedPod(ctx, p.Name); err != nil {
						return err
					}
				}
			}
			return nil
		}, awaits: []string{"Events of batch/CronJob cron: Normal JobAlreadyActive", "Job batch/replace-<+2m> "}},
		{name: "suspend the CronJobs; resume the suspended Job; the Indexed Job's and the TTL Job's running pods succeed", do: func(ctx context.Context, s *side) error {
			for _, cj := range []string{"cron", "replace"} {
				if err := mergePatch(ctx, s.f.Client.BatchV1().CronJobs(s.ns["batch"]), cj,
					`{"spec":{"suspend":true,"jobTemplate":{"spec":{"template":{"metadata":{"labels":{"`+kwokLabel+`":null}}}}}}}`); err != nil {
					return err
				}
			}
			if err := mergePatch(ctx, s.f.Client.BatchV1().Jobs(s.ns["batch"]), "suspend", `{"spec":{"suspend":false}}`); err != nil {
				return err
			}
			_, err := s.succeedRunning(ctx, func(job string) bool { return job == "indexed" || job == "ttl" })
			return err
		}},
		// The CronJob's Job finishes before the next is created, so that the CronJob
		// controller sees it finish (SawCompletedJob) before the history limit deletes it.
		{name: "the CronJobs' Jobs and the resumed Job's pods succeed", do: func(ctx context.Context, s *side) error {
			err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
				n, err := s.succeedRunning(ctx, func(job string) bool { return job != "suspend" })
				return n > 0, err
			})
			if err != nil {
				return fmt.Errorf("the CronJob's Job's pod: %w", err)
			}
			succeeded := 0
			return pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
				n, err := s.succeedRunning(ctx, func(job string) bool { return job == "suspend" })
				succeeded += n
				return succeeded == 2, err
			})
		}, awaits: []string{"CronJob batch/cron lastSuccessfulTime", "CronJob batch/replace lastSuccessfulTime"}},
		{name: "kubectl create job --from=cronjob: the history limit deletes the older Job", do: func(ctx context.Context, s *side) error {
			return s.kubectl(ctx, "batch", "create", "job", "manual", "--from=cronjob/cron")
		}, awaits: []string{"Job batch/manual "}},
	}
}

// succeedRunning lets kwok complete the running pods of the Jobs named so, and says how
// many.
func (s *side) succeedRunning(ctx context.Context, of func(job string) bool) (int, error) {
	pods, err := s.f.Client.CoreV1().Pods(s.ns["batch"]).List(ctx, metav1.ListOptions{LabelSelector: kwokLabel + "=run"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if !of(p.Labels[batchv1.JobNameLabel]) || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if err := s.succeedPod(ctx, p.Name); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (s *side) jobPods(ctx context.Context, job string) ([]corev1.Pod, error) {
	l, err := s.f.Client.CoreV1().Pods(s.ns["batch"]).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (s *side) patchPod(ctx context.Context, name, patch string) error {
	return mergePatch(ctx, s.f.Client.CoreV1().Pods(s.ns["batch"]), name, patch)
}

// succeedPod lets kwok complete a running pod.
func (s *side) succeedPod(ctx context.Context, name string) error {
	return s.patchPod(ctx, name, `{"metadata":{"labels":{"`+kwokLabel+`":null}}}`)
}

// failPod lets kwok fail a running pod with exit code.
func (s *side) failPod(ctx context.Context, name string, code int) error {
	return s.patchPod(ctx, name, fmt.Sprintf(`{"metadata":{"labels":{%q:"fail"},"annotations":{%q:"%d"}}}`, kwokLabel, exitCodeAnnotation, code))
}

// disruptPod fails a running pod as the kubelet does when it terminates a pod for a node
// shutdown: a DisruptionTarget condition, exit code 137.
func (s *side) disruptPod(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := s.f.Client.CoreV1().Pods(s.ns["batch"]).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: "Pod was terminated in response to imminent node shutdown.", LastTransitionTime: now})
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status, c.LastTransitionTime = corev1.ConditionFalse, now
			}
		}
		for i := range p.Status.ContainerStatuses {
			c := &p.Status.ContainerStatuses[i]
			c.Ready, c.Started = false, kptr.To(false)
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", StartedAt: now, FinishedAt: now}}
		}
		_, err = s.f.Client.CoreV1().Pods(s.ns["batch"]).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}
