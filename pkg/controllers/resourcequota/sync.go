package resourcequota

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	quota "k8s.io/apiserver/pkg/quota/v1"

	"github.com/kshard/kshard/pkg/controllers"
)

// sync recomputes one quota's usage from the shard's caches and writes its status if it
// changed. Every queue's workers run it.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		log.Error(err, "dropping a malformed key")
		return nil
	}
	start := time.Now()
	defer func() { log.V(4).Info("finished syncing resource quota", "duration", time.Since(start)) }()
	rq, err := c.quotaLister.ResourceQuotas(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.Info("resource quota has been deleted")
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncQuota(ctx, rq)
}

// syncQuota is upstream's status rule. status.hard is spec.hard. status.used starts from
// the old usage and takes every resource an evaluator computed: a resource whose
// evaluator failed (its cache not synced) keeps its old usage, and the error retries the
// quota. used names the hard resources only. Status is written, from the cached quota
// (its resourceVersion: a conflict retries), only when it changed: hard differs, status
// was never written, or used changed.
func (c *Controller) syncQuota(ctx context.Context, rq *corev1.ResourceQuota) error {
	dirty := !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) ||
		rq.Status.Hard == nil || rq.Status.Used == nil

	used := corev1.ResourceList{}
	if rq.Status.Used != nil {
		used = quota.Add(corev1.ResourceList{}, rq.Status.Used)
	}
	hard := quota.Add(corev1.ResourceList{}, rq.Spec.Hard)

	var errs []error
	newUsage, err := quota.CalculateUsage(rq.Namespace, rq.Spec.Scopes, hard, c.registry, rq.Spec.ScopeSelector)
	if err != nil {
		// Keep going: the resources that were computed are written.
		errs = append(errs, err)
	}
	for name, q := range newUsage {
		used[name] = q
	}
	used = quota.Mask(used, quota.ResourceNames(hard))

	updated := rq.DeepCopy()
	updated.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	dirty = dirty || !quota.Equals(updated.Status.Used, rq.Status.Used)
	if dirty {
		if _, err := c.client.CoreV1().ResourceQuotas(rq.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
