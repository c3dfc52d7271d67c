package cronjob

import (
	"fmt"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// jobName is the name of the Job of cj's schedule time t: the CronJob's name and t in
// whole minutes since the Unix epoch. One schedule time has one name, so the API server
// refuses a second Job for it.
func jobName(cj *batchv1.CronJob, t time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, t.Unix()/60)
}

// newJob returns the Job to create for cj's schedule time t: the job template's labels,
// annotations and spec, the scheduled-timestamp annotation (t in RFC 3339, in the
// CronJob's time zone, UTC without one), and cj as its controller.
func newJob(cj *batchv1.CronJob, t time.Time) (*batchv1.Job, error) {
	loc, err := time.LoadLocation(ptr.Deref(cj.Spec.TimeZone, ""))
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(cj.Spec.JobTemplate.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	annotations := maps.Clone(cj.Spec.JobTemplate.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[batchv1.CronJobScheduledTimestampAnnotation] = t.In(loc).Format(time.RFC3339)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              jobName(cj, t),
			Labels:            labels,
			Annotations:       annotations,
			CreationTimestamp: metav1.Time{Time: t},
			OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(cj, kind)},
		},
	}
	cj.Spec.JobTemplate.Spec.DeepCopyInto(&job.Spec)
	return job, nil
}

// jobRef is the status.active entry of job.
func jobRef(job *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{
		Kind:            "Job",
		APIVersion:      batchv1.SchemeGroupVersion.String(),
		Namespace:       job.Namespace,
		Name:            job.Name,
		UID:             job.UID,
		ResourceVersion: job.ResourceVersion,
	}
}

// finished returns the type of job's true Complete or Failed condition, if any.
func finished(job *batchv1.Job) (batchv1.JobConditionType, bool) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type, true
		}
	}
	return "", false
}

func succeeded(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func isActive(cj *batchv1.CronJob, uid types.UID) bool {
	for _, r := range cj.Status.Active {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func isActiveByName(cj *batchv1.CronJob, namespace, name string) bool {
	for _, r := range cj.Status.Active {
		if r.Name == name && r.Namespace == namespace {
			return true
		}
	}
	return false
}

// removeActive drops uid from status.active (which becomes an empty, non-nil list, as
// upstream writes it).
func removeActive(cj *batchv1.CronJob, uid types.UID) {
	out := []corev1.ObjectReference{}
	for _, r := range cj.Status.Active {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	cj.Status.Active = out
}
