package serviceaccount

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// sync creates, in the namespace named key, each ServiceAccount the controller ensures
// that the cache does not hold, if the namespace is Active. A create refused because the
// ServiceAccount exists, or because the namespace began terminating, is not an error;
// other failures are returned together, and the namespace is retried.
func (c *Controller) sync(ctx context.Context, key string) error {
	start := time.Now()
	log := klog.FromContext(ctx).WithValues("namespace", key)
	defer func() { log.V(4).Info("finished syncing namespace", "duration", time.Since(start)) }()

	ns, err := c.nsLister.Get(key)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.Status.Phase != corev1.NamespaceActive {
		// Nothing new goes into a namespace that is not active (terminating).
		return nil
	}
	var failures []error
	for _, want := range c.ensure {
		switch _, err := c.saLister.ServiceAccounts(ns.Name).Get(want.Name); {
		case err == nil:
			continue
		case !apierrors.IsNotFound(err):
			return err
		}
		sa := want.DeepCopy()
		sa.Namespace = ns.Name
		_, err := c.client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{})
		switch {
		case err == nil:
			log.V(2).Info("created service account", "name", sa.Name)
		case apierrors.IsAlreadyExists(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// Someone else created it, or the namespace is going away: nothing to do.
		default:
			failures = append(failures, err)
		}
	}
	return errors.Join(failures...)
}
