package namespacelife

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/test/framework"
)

const (
	rootCAName        = "kube-root-ca.crt"
	descriptionKey    = "kubernetes.io/description"
	descriptionString = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
)

// published reports whether cm is kube-root-ca.crt as the publisher writes it: data
// exactly {ca.crt: bundle}, upstream's description annotation.
func published(bundle []byte) func(*corev1.ConfigMap) bool {
	want := map[string]string{"ca.crt": string(bundle)}
	return func(cm *corev1.ConfigMap) bool {
		return maps.Equal(cm.Data, want) && cm.Annotations[descriptionKey] == descriptionString
	}
}

// A new namespace gets kube-root-ca.crt holding --root-ca-file's bundle; an edit of its
// data is reverted, a removed annotation put back (an added one kept), and a deleted one
// is created again.
func TestRootCAConfigMap(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	ctx := context.Background()
	bundle := wantBundle(t)
	ok := published(bundle)
	ns := f.Namespace(t, nil).Name
	cms := f.Client.CoreV1().ConfigMaps(ns)

	cm := waitRootCA(t, ns, nil)
	if !ok(cm) {
		t.Fatalf("%s/%s: data %q annotations %v; want ca.crt = the --root-ca-file bundle (%d bytes) and upstream's description",
			ns, rootCAName, cm.Data, cm.Annotations, len(bundle))
	}

	t.Run("an edit of its data is reverted", func(t *testing.T) {
		edit := cm.DeepCopy()
		edit.Data = map[string]string{"ca.crt": "edited", "extra": "x"}
		edit.Annotations["team"] = "mine"
		updated, err := cms.Update(ctx, edit, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm = waitRootCA(t, ns, func(c *corev1.ConfigMap) bool { return c.ResourceVersion != updated.ResourceVersion && ok(c) })
		if cm.Annotations["team"] != "mine" {
			t.Errorf("annotations %v: the repair dropped an annotation of someone else", cm.Annotations)
		}
	})

	t.Run("a removed annotation is put back", func(t *testing.T) {
		edit := cm.DeepCopy()
		delete(edit.Annotations, descriptionKey)
		updated, err := cms.Update(ctx, edit, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm = waitRootCA(t, ns, func(c *corev1.ConfigMap) bool { return c.ResourceVersion != updated.ResourceVersion && ok(c) })
	})

	t.Run("a deleted one is created again", func(t *testing.T) {
		if err := cms.Delete(ctx, rootCAName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		again := waitRootCA(t, ns, func(c *corev1.ConfigMap) bool { return c.UID != cm.UID })
		if !ok(again) {
			t.Errorf("re-created with data %q annotations %v", again.Data, again.Annotations)
		}
	})
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
