package batch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// A finished Job with ttlSecondsAfterFinished is deleted that long after it finished; one
// with a long TTL stays.
func TestTTLAfterFinishedDeletesFinishedJob(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	ctx := context.Background()
	mk := func(name string, ttl int32) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{TTLSecondsAfterFinished: ptr.To(ttl), Template: cronPodTemplate()}}
		if _, err := e.cs.BatchV1().Jobs(e.ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Watch the Job, to see when its deletion began and with which propagation (a
	// foreground deletion first sets deletionTimestamp and the foregroundDeletion
	// finalizer, then the garbage collector deletes the pods and the Job).
	w, err := e.cs.BatchV1().Jobs(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=short"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type deletion struct {
		at         time.Time
		finalizers []string
	}
	began := make(chan deletion, 1)
	go func() {
		for ev := range w.ResultChan() {
			if j, ok := ev.Object.(*batchv1.Job); ok && (j.DeletionTimestamp != nil || ev.Type == watch.Deleted) {
				began <- deletion{at: time.Now(), finalizers: j.Finalizers}
				return
			}
		}
	}()
	mk("short", 5)
	mk("long", 3600)
	var finishedAt time.Time
	e.eventually(90*time.Second, "job short finishes", func(ctx context.Context) error {
		j, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, "short", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == "True" {
				finishedAt = c.LastTransitionTime.Time
				return nil
			}
		}
		return fmt.Errorf("not finished: %+v", j.Status)
	})
	e.eventually(60*time.Second, "job short deleted", func(ctx context.Context) error {
		_, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, "short", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	select {
	case d := <-began:
		// lastTransitionTime has whole seconds: allow one.
		if d.at.Before(finishedAt.Add(4 * time.Second)) {
			t.Errorf("deletion began at %s, before finish %s + TTL 5s", d.at, finishedAt)
		}
		if !slices.Contains(d.finalizers, metav1.FinalizerDeleteDependents) {
			t.Errorf("finalizers when the deletion began: %v, want %s (foreground propagation)", d.finalizers, metav1.FinalizerDeleteDependents)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch did not see the deletion")
	}
	j, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, "long", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("job long: %v", err)
	}
	if j.DeletionTimestamp != nil {
		t.Error("job long is being deleted")
	}
}
