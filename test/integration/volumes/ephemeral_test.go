package volumes

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/kshard/kshard/test/framework"
)

// template is the tests' ephemeral volume claim template.
func template() corev1.PersistentVolumeClaimTemplate {
	return corev1.PersistentVolumeClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"kshard.io/note": "scratch"}},
		Spec:       claimSpec(""),
	}
}

// ownedBy reports whether c is controlled by pod, with blockOwnerDeletion.
func ownedBy(pod *corev1.Pod) func(c *corev1.PersistentVolumeClaim) bool {
	return func(c *corev1.PersistentVolumeClaim) bool {
		ref := metav1.GetControllerOf(c)
		return ref != nil && ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == pod.Name && ref.UID == pod.UID &&
			ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion
	}
}

// A pod's ephemeral volume gets its claim, <pod>-<volume>, controlled by the pod, with the
// template's labels, annotations and spec; the claim stays while the pod runs, and goes
// with the pod (the garbage collector deletes it, PVC protection lets it go).
func TestEphemeralClaimCreatedAndCollected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pod := e.createPod("web", onNode, withEphemeral("scratch", template()))
	c := e.waitClaim("created for the pod", "web-scratch", func(*corev1.PersistentVolumeClaim) bool { return true })
	if !ownedBy(pod)(c) {
		t.Errorf("owner references %+v, want the pod %s as controller with blockOwnerDeletion", c.OwnerReferences, pod.UID)
	}
	if c.Labels["app"] != "web" || c.Annotations["kshard.io/note"] != "scratch" {
		t.Errorf("labels %v, annotations %v: want the template's", c.Labels, c.Annotations)
	}
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "" || c.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("spec %+v, want the template's", c.Spec)
	}
	e.waitClaim("protected", "web-scratch", hasFinalizer)
	e.waitRunning("web")
	e.deletePod("web")
	e.waitClaimGone("web-scratch", c.UID)
}

// A claim of the ephemeral volume's name that is not the pod's is left alone, and the pod
// gets a Warning FailedBinding from ephemeral_volume saying so. When the pod's first sync
// comes before the controller's claim cache has the claim, the controller tries to create
// it and records the create's AlreadyExists as a FailedBinding too, as upstream's does;
// the next sync finds the claim and records the message checked here.
func TestEphemeralClaimOfAnotherOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	squatter := e.createClaim("web-scratch", "")
	e.createPod("web", unschedulable, withEphemeral("scratch", template()))
	want := fmt.Sprintf("ephemeral volume scratch: PVC %[1]s/web-scratch was not created for pod %[1]s/web (pod is not owner)", e.ns)
	raced := `ephemeral volume scratch: create PVC web-scratch: persistentvolumeclaims "web-scratch" already exists`
	var others []string
	sawRace := false
	framework.Eventually(t, timeout, "a FailedBinding event on the pod", func(ctx context.Context) (bool, error) {
		evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return false, err
		}
		found := false
		others = others[:0]
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == "FailedBinding" && ev.Source.Component == "ephemeral_volume" {
				switch ev.Message {
				case want:
					found = true
				case raced:
					sawRace = true
				default:
					others = append(others, ev.Message)
				}
			}
		}
		if !found {
			return false, fmt.Errorf("FailedBinding messages %q, want %q", others, want)
		}
		return true, nil
	})
	if sawRace {
		t.Logf("the pod's first sync came before the claim cache had the claim: the create failed with AlreadyExists")
	}
	for _, m := range others {
		t.Errorf("FailedBinding message %q, want only %q (or the create's AlreadyExists before the cache has the claim)", m, want)
	}
	c, err := e.claim(context.Background(), "web-scratch")
	if err != nil || c == nil || c.UID != squatter.UID || len(c.OwnerReferences) != 0 {
		t.Errorf("the claim was touched: %+v, %v", c, err)
	}
}

// The claim of a pod not yet bound to a node, deleted, goes (no pod uses it yet) and is
// created again for the pod.
func TestEphemeralClaimCreatedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pod := e.createPod("web", unschedulable, withEphemeral("scratch", template()))
	first := e.waitClaim("created for the pod", "web-scratch", ownedBy(pod))
	e.deleteClaim("web-scratch")
	e.waitClaimGone("web-scratch", first.UID)
	e.waitClaim("created again for the pod", "web-scratch", func(c *corev1.PersistentVolumeClaim) bool {
		return c.UID != first.UID && ownedBy(pod)(c)
	})
}
