package cronjob

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

func TestNewJob(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cj             *batchv1.CronJob
		at             time.Time
		wantName       string
		wantAnnotation string
	}{
		{name: "UTC", cj: newCronJob("backup", "@hourly"), at: t0,
			wantName: "backup-29627280", wantAnnotation: "2026-05-01T12:00:00Z"},
		{name: "annotation in the CronJob's time zone", cj: newCronJob("backup", "0 21 * * *", timeZone("Asia/Tokyo")), at: t0,
			wantName: "backup-29627280", wantAnnotation: "2026-05-01T21:00:00+09:00"},
		{name: "one minute later, one more in the name", cj: newCronJob("b", "*/1 * * * *"), at: t0.Add(time.Minute),
			wantName: "b-29627281", wantAnnotation: "2026-05-01T12:01:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := newJob(tc.cj, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if job.Name != tc.wantName {
				t.Errorf("name %q, want %q", job.Name, tc.wantName)
			}
			if got := job.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; got != tc.wantAnnotation {
				t.Errorf("scheduled-timestamp annotation %q, want %q", got, tc.wantAnnotation)
			}
			if job.Annotations["note"] != "x" || job.Labels["app"] != "cron" {
				t.Errorf("template labels/annotations not copied: %v %v", job.Labels, job.Annotations)
			}
			if _, ok := tc.cj.Spec.JobTemplate.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; ok {
				t.Error("the CronJob's template was changed")
			}
			if !equality.Semantic.DeepEqual(job.Spec, tc.cj.Spec.JobTemplate.Spec) {
				t.Error("spec differs from the template's")
			}
			if len(job.OwnerReferences) != 1 {
				t.Fatalf("owner references %v", job.OwnerReferences)
			}
			ref := job.OwnerReferences[0]
			if ref.Kind != "CronJob" || ref.APIVersion != "batch/v1" || ref.Name != tc.cj.Name || ref.UID != tc.cj.UID ||
				!ptr.Deref(ref.Controller, false) || !ptr.Deref(ref.BlockOwnerDeletion, false) {
				t.Errorf("owner reference %+v", ref)
			}
			if !job.CreationTimestamp.Time.Equal(tc.at) {
				t.Errorf("creationTimestamp %v", job.CreationTimestamp)
			}
		})
	}
}

func TestActiveList(t *testing.T) {
	cj := newCronJob("a", "@hourly")
	j1, j2 := jobOf(cj, t0), jobOf(cj, t0.Add(time.Hour))
	active(j1, j2)(cj)
	if !isActive(cj, j1.UID) || !isActiveByName(cj, "ns", j2.Name) || isActiveByName(cj, "other", j2.Name) {
		t.Fatal("lookups wrong")
	}
	removeActive(cj, j1.UID)
	if isActive(cj, j1.UID) || !isActive(cj, j2.UID) {
		t.Error("removeActive removed the wrong one")
	}
	removeActive(cj, j2.UID)
	if cj.Status.Active == nil || len(cj.Status.Active) != 0 {
		t.Errorf("active %v, want an empty list", cj.Status.Active)
	}
	if r := jobRef(j1); r.Kind != "Job" || r.APIVersion != "batch/v1" || r.UID != j1.UID || r.ResourceVersion != "1" {
		t.Errorf("jobRef %+v", r)
	}
}
