package rootcacertpublisher

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// sync makes the namespace named key hold kube-root-ca.crt with the bundle and the
// description annotation: created when the cache does not hold it, updated when its data
// differ from {ca.crt: bundle} or the annotation is empty.
func (c *Controller) sync(ctx context.Context, key string) (err error) {
	start := time.Now()
	log := klog.FromContext(ctx).WithValues("namespace", key, "name", ConfigMapName)
	defer func() {
		c.syncs.observe(start, err)
		log.V(4).Info("finished syncing namespace", "elapsedTime", time.Since(start))
	}()

	want := map[string]string{DataKey: string(c.rootCA)}
	cm, err := c.cmLister.ConfigMaps(key).Get(ConfigMapName)
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.client.CoreV1().ConfigMaps(key).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data:       want,
		}, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// The namespace is gone or going: nothing to publish into, nothing to retry.
			return nil
		}
		if err == nil {
			log.V(2).Info("created root CA ConfigMap")
		}
		return err
	case err != nil:
		return err
	}
	if maps.Equal(cm.Data, want) && cm.Annotations[DescriptionAnnotation] != "" {
		return nil
	}
	cm = cm.DeepCopy() // the cache's copy is shared
	cm.Data = want
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[DescriptionAnnotation] = Description
	if _, err = c.client.CoreV1().ConfigMaps(key).Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
		log.V(2).Info("repaired root CA ConfigMap")
	}
	return err
}
