package cronjob

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
)

func TestPruneHistory(t *testing.T) {
	cj := newCronJob("c", "@hourly")
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	ok1, ok2, ok3 := jobOf(cj, h(1), completeAt(h(1))), jobOf(cj, h(2), completeAt(h(2))), jobOf(cj, h(3), completeAt(h(3)))
	bad1, bad2 := jobOf(cj, h(4), failedAt(h(4))), jobOf(cj, h(5), failedAt(h(5)))
	running := jobOf(cj, h(6))
	unstarted := jobOf(cj, h(7), notStarted(), completeAt(h(7)))
	all := []*batchv1.Job{ok3, bad2, running, ok1, bad1, ok2}
	for _, tc := range []struct {
		name              string
		succeeded, failed *int32
		jobs              []*batchv1.Job
		wantDeleted       []string
	}{
		{name: "no limits: nothing", jobs: all},
		{name: "keep 1 succeeded", succeeded: ptr.To[int32](1), jobs: all, wantDeleted: []string{ok1.Name, ok2.Name}},
		{name: "keep 0 failed", failed: ptr.To[int32](0), jobs: all, wantDeleted: []string{bad1.Name, bad2.Name}},
		{name: "both", succeeded: ptr.To[int32](2), failed: ptr.To[int32](1), jobs: all, wantDeleted: []string{ok1.Name, bad1.Name}},
		{name: "within the limits", succeeded: ptr.To[int32](3), failed: ptr.To[int32](3), jobs: all},
		{name: "running jobs are never deleted", succeeded: ptr.To[int32](0), failed: ptr.To[int32](0), jobs: []*batchv1.Job{running}},
		{name: "unstarted jobs count as newest", succeeded: ptr.To[int32](1), jobs: []*batchv1.Job{unstarted, ok3},
			wantDeleted: []string{ok3.Name}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCronJob("c", "@hourly", history(tc.succeeded, tc.failed), active(ok1))
			f := newFixture(t, h(8), objs(c, tc.jobs...)...)
			changed := f.ctrl.pruneHistory(t.Context(), c, tc.jobs)
			var deleted []string
			for _, a := range f.actions() {
				if name, ok := strings.CutPrefix(a, "delete jobs "); ok {
					deleted = append(deleted, name)
				}
			}
			if !slices.Equal(deleted, tc.wantDeleted) {
				t.Errorf("deleted %v, want %v (in this order)", deleted, tc.wantDeleted)
			}
			if changed != (len(tc.wantDeleted) > 0) {
				t.Errorf("changed = %v", changed)
			}
			if slices.Contains(tc.wantDeleted, ok1.Name) && isActive(c, ok1.UID) {
				t.Error("a deleted job stays in status.active")
			}
			if n := len(f.Events()); n != len(tc.wantDeleted) {
				t.Errorf("%d events, want one SuccessfulDelete per deleted job", n)
			}
		})
	}
}
