package ttlafterfinished

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/job"

func TestSync(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	for _, tc := range []struct {
		name        string
		cached      *batchv1.Job
		api         *batchv1.Job // nil: not in the API server
		wantActions []string
		wantAfter   time.Duration // 0: not requeued
		wantErr     bool
	}{
		{name: "not in the cache: nothing", wantActions: nil},
		{name: "no TTL: nothing", cached: newJob("job", completeAt(ago(time.Hour)))},
		{name: "not finished: nothing", cached: newJob("job", ttl(0))},
		{name: "a false Complete condition is not finished", cached: newJob("job", ttl(0),
			condition(batchv1.JobComplete, corev1.ConditionFalse, ago(time.Hour)))},
		{name: "being deleted: nothing", cached: newJob("job", ttl(0), completeAt(ago(time.Hour)), deleting())},
		{name: "TTL not yet run out: requeued for it", cached: newJob("job", ttl(100), completeAt(ago(40*time.Second))),
			wantAfter: 60 * time.Second},
		{name: "finished in the future (clock skew): requeued", cached: newJob("job", ttl(10), completeAt(t0.Add(5*time.Second))),
			wantAfter: 15 * time.Second},
		{name: "expired, and on the API server too: deleted", cached: newJob("job", ttl(100), completeAt(ago(100*time.Second))),
			api:         newJob("job", ttl(100), completeAt(ago(100*time.Second))),
			wantActions: []string{"get jobs job", "delete jobs job"}},
		{name: "failed jobs too", cached: newJob("job", ttl(0), failedAt(ago(time.Second))),
			api:         newJob("job", ttl(0), failedAt(ago(time.Second))),
			wantActions: []string{"get jobs job", "delete jobs job"}},
		{name: "expired in the cache, gone from the API: nothing", cached: newJob("job", ttl(0), completeAt(ago(time.Hour))),
			wantActions: []string{"get jobs job"}},
		{name: "TTL raised on the API server: requeued for the new one", cached: newJob("job", ttl(10), completeAt(ago(time.Minute))),
			api:         newJob("job", ttl(120), completeAt(ago(time.Minute))),
			wantActions: []string{"get jobs job"}, wantAfter: time.Minute},
		{name: "TTL removed on the API server: nothing", cached: newJob("job", ttl(10), completeAt(ago(time.Minute))),
			api: newJob("job", completeAt(ago(time.Minute))), wantActions: []string{"get jobs job"}},
		{name: "being deleted on the API server: nothing", cached: newJob("job", ttl(10), completeAt(ago(time.Minute))),
			api: newJob("job", ttl(10), completeAt(ago(time.Minute)), deleting()), wantActions: []string{"get jobs job"}},
		{name: "a finished condition without a time is an error", cached: newJob("job", ttl(10), completeAt(time.Time{})),
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cached, api []*batchv1.Job
			if tc.cached != nil {
				cached = append(cached, tc.cached)
			}
			if tc.api != nil {
				api = append(api, tc.api)
			}
			f := newFixture(t, cached, api...)
			err := f.Sync(key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			d, ok := f.Queue.After(key)
			if tc.wantAfter == 0 && ok || tc.wantAfter != 0 && d != tc.wantAfter {
				t.Errorf("requeued after %v (%v), want %v", d, ok, tc.wantAfter)
			}
		})
	}
}

// The delete cascades in the foreground and names the UID of the Job it checked, so a
// new Job of the same name is never deleted in its place.
func TestDeleteOptions(t *testing.T) {
	j := newJob("job", ttl(0), completeAt(t0.Add(-time.Second)), uid("fresh-uid"))
	f := newFixture(t, []*batchv1.Job{newJob("job", ttl(0), completeAt(t0.Add(-time.Second)))}, j)
	if err := f.Sync(key); err != nil {
		t.Fatal(err)
	}
	o := f.deleteOptions()
	if o == nil || o.PropagationPolicy == nil || *o.PropagationPolicy != metav1.DeletePropagationForeground ||
		o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID != "fresh-uid" {
		t.Errorf("delete options %+v", o)
	}
}

func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		want []string
	}{
		{name: "finished with a TTL", job: newJob("job", ttl(5), completeAt(t0)), want: []string{key}},
		{name: "failed with a TTL", job: newJob("job", ttl(5), failedAt(t0)), want: []string{key}},
		{name: "no TTL", job: newJob("job", completeAt(t0))},
		{name: "running", job: newJob("job", ttl(5))},
		{name: "being deleted", job: newJob("job", ttl(5), completeAt(t0), deleting())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.ctrl.observe(controllertest.Logger(t), tc.job)
			if got := f.Queue.Keys(); !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}
