package podcontrol

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Event reasons, upstream's (k8s.io/kubernetes/pkg/controller's pod control).
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// ErrNoLabels refuses to create a pod that no selector could ever find again; upstream
// refuses it with the same words.
var ErrNoLabels = errors.New("unable to create pods, no labels")

// FromTemplate builds a pod of template in namespace, controlled by ref, named
// generateName plus a random suffix by the API server. The template is copied, so the
// caller may change the pod freely; labels and annotations are empty maps rather than
// nil, as upstream's pods have them.
func FromTemplate(template *corev1.PodTemplateSpec, namespace, generateName string, ref *metav1.OwnerReference) *corev1.Pod {
	t := template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       namespace,
			GenerateName:    generateName,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*ref},
		},
		Spec: t.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	return pod
}

// GenerateNamePrefix is "<name>-", or name alone when the dash would make the prefix an
// invalid name (upstream's rule: the API server then still appends its suffix).
func GenerateNamePrefix(name string) string {
	if p := name + "-"; len(apivalidation.NameIsDNSSubdomain(p, true)) == 0 {
		return p
	}
	return name
}

// Control creates and deletes pods for an owner and records upstream's events on it.
type Control struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
}

// Create creates pod (in its namespace) for owner and records the event; it refuses a pod
// without labels (ErrNoLabels). It returns the pod the API server created, whose
// resourceVersion the caller records for its read-your-writes guard.
func (c Control) Create(ctx context.Context, owner runtime.Object, pod *corev1.Pod) (*corev1.Pod, error) {
	if len(pod.Labels) == 0 {
		return nil, ErrNoLabels
	}
	created, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		// A namespace being deleted refuses every create; upstream records nothing then.
		if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			c.Recorder.Eventf(owner, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		}
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("created pod", "pod", klog.KObj(created))
	c.Recorder.Eventf(owner, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return created, nil
}

// Delete deletes owner's pod namespace/name and records the event. A pod already gone is
// returned as the API server's NotFound, without an event: callers count it as deleted.
func (c Control) Delete(ctx context.Context, owner runtime.Object, namespace, name string) error {
	klog.FromContext(ctx).V(2).Info("deleting pod", "pod", klog.KRef(namespace, name))
	if err := c.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		c.Recorder.Eventf(owner, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("unable to delete pods: %w", err)
	}
	c.Recorder.Eventf(owner, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", name)
	return nil
}
