package ttlafterfinished

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
)

// sync deletes the Job key ("namespace/name") if its TTL after finishing has run out,
// checked on the cached Job and again on the API server's, and otherwise queues it again
// for when it runs out.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	log.V(4).Info("checking whether the job is due for cleanup")

	job, err := c.lister.Jobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if due, err := c.expired(ctx, key, job); err != nil || !due {
		return err
	}
	// The cached Job may be behind: its TTL may have been raised or removed, or the Job
	// replaced by a new one of the same name. Decide on the API server's copy.
	fresh, err := c.client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if due, err := c.expired(ctx, key, fresh); err != nil || !due {
		return err
	}
	foreground := metav1.DeletePropagationForeground
	log.V(4).Info("cleaning up job")
	return c.client.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: &foreground,
		Preconditions:     &metav1.Preconditions{UID: &fresh.UID},
	})
}

// expired reports whether job is finished, has a TTL, is not being deleted and its TTL
// has run out; when it has not yet, it queues key for when it will.
func (c *Controller) expired(ctx context.Context, key string, job *batchv1.Job) (bool, error) {
	if job.DeletionTimestamp != nil || !needsCleanup(job) {
		return false, nil
	}
	finishedAt, _ := finishTime(job)
	if finishedAt.IsZero() {
		return false, fmt.Errorf("unable to find the time when the Job %s/%s finished", job.Namespace, job.Name)
	}
	now := c.clock.Now()
	expireAt := finishedAt.Add(time.Duration(*job.Spec.TTLSecondsAfterFinished) * time.Second)
	log := klog.FromContext(ctx)
	if finishedAt.After(now) {
		log.Info("Warning: Found Job finished in the future. This is likely due to time skew in the cluster. Job cleanup will be deferred.")
	}
	left := expireAt.Sub(now)
	log.V(4).Info("found finished job", "finishTime", finishedAt.UTC(), "remainingTTL", left, "deadlineTTL", expireAt.UTC())
	if left <= 0 {
		return true, nil
	}
	c.queue.AddAfter(key, left)
	return false, nil
}
