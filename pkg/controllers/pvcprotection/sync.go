package pvcprotection

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-helpers/storage/ephemeral"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/podclaims"
)

// The Unused condition's reasons and messages (upstream's).
const (
	reasonUsed    = "PodUsingPVC"
	messageUsed   = "A pod is currently referencing this PVC"
	reasonUnused  = "NoPodsUsingPVC"
	messageUnused = "No pods are currently referencing this PVC"
)

// sync works the claim key ("namespace/name"): the Unused condition of a Bound claim, the
// finalizer's removal from a deleted claim no pod uses, the finalizer's addition to a
// claim that lacks it.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	pvc, err := c.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("claim not found, ignoring")
		return nil
	}
	if err != nil {
		return err
	}
	// One live list of the namespace's pods serves both checks of this sync.
	live := &livePods{}
	if pvc.DeletionTimestamp == nil && pvc.Status.Phase == corev1.ClaimBound {
		// Only a Bound claim: the PV controller writes the status of a claim it binds.
		used, err := c.inUse(ctx, pvc, live, referencesForUnused)
		if err != nil {
			return err
		}
		if err := c.updateUnused(ctx, pvc, used); err != nil {
			return err
		}
	}
	if deletionCandidate(pvc) {
		used, err := c.inUse(ctx, pvc, live, usesForDeletion)
		if err != nil {
			return err
		}
		if !used {
			return c.writeFinalizers(ctx, pvc, slices.DeleteFunc(slices.Clone(pvc.Finalizers), func(f string) bool { return f == Finalizer }), "removed")
		}
		log.V(2).Info("keeping the claim: a pod uses it")
	}
	if needsFinalizer(pvc) {
		// The admission plugin adds it on create; this covers claims created without it.
		return c.writeFinalizers(ctx, pvc, append(slices.Clone(pvc.Finalizers), Finalizer), "added")
	}
	return nil
}

// writeFinalizers updates pvc (the cached copy: a stale one conflicts and is retried)
// with finalizers.
func (c *Controller) writeFinalizers(ctx context.Context, pvc *corev1.PersistentVolumeClaim, finalizers []string, what string) error {
	log := klog.FromContext(ctx)
	clone := pvc.DeepCopy()
	clone.Finalizers = finalizers
	if _, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, clone, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("protection finalizer not %s: %w", what, err)
	}
	log.V(3).Info("protection finalizer "+what, "finalizer", Finalizer)
	return nil
}

// updateUnused writes the Unused condition when it does not say what used says: False
// (PodUsingPVC) for a used claim, True (NoPodsUsingPVC) for an unused one, with now as
// its lastTransitionTime.
func (c *Controller) updateUnused(ctx context.Context, pvc *corev1.PersistentVolumeClaim, used bool) error {
	cur := unusedCondition(pvc)
	want := corev1.PersistentVolumeClaimCondition{Type: corev1.PersistentVolumeClaimUnused,
		LastTransitionTime: metav1.NewTime(c.clock.Now())}
	switch {
	case used && (cur == nil || cur.Status == corev1.ConditionTrue):
		want.Status, want.Reason, want.Message = corev1.ConditionFalse, reasonUsed, messageUsed
	case !used && (cur == nil || cur.Status != corev1.ConditionTrue):
		want.Status, want.Reason, want.Message = corev1.ConditionTrue, reasonUnused, messageUnused
	default:
		return nil
	}
	clone := pvc.DeepCopy()
	if i := slices.IndexFunc(clone.Status.Conditions, isUnused); i >= 0 {
		clone.Status.Conditions[i] = want
	} else {
		clone.Status.Conditions = append(clone.Status.Conditions, want)
	}
	if _, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, clone, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the Unused condition: %w", err)
	}
	klog.FromContext(ctx).V(3).Info("Unused condition updated", "status", want.Status)
	return nil
}

// uses says whether pod uses pvc for one of the controller's two questions.
type uses func(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) bool

// livePods is one sync's list of the namespace's pods from the API server, made when
// first needed.
type livePods struct {
	pods []corev1.Pod
	done bool
}

// inUse reports whether a pod uses pvc: first among the cached pods that name it (a hit
// decides without a request), then among the namespace's pods listed from the API server,
// because a pod the cache has not seen yet may use it.
func (c *Controller) inUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim, live *livePods, use uses) (bool, error) {
	log := klog.FromContext(ctx)
	cached, err := podclaims.Pods(c.podIndexer, pvc.Namespace, pvc.Name)
	if err != nil {
		// The live list below decides.
		log.Error(err, "cache-based list of pods failed")
	}
	for _, pod := range cached {
		if use(pod, pvc) {
			log.V(4).Info("a cached pod uses the claim", "pod", klog.KObj(pod))
			return true, nil
		}
	}
	if !live.done {
		log.V(4).Info("listing the namespace's pods from the API server")
		list, err := c.client.CoreV1().Pods(pvc.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("live list of pods failed: %w", err)
		}
		live.pods, live.done = list.Items, true
	}
	for i := range live.pods {
		if use(&live.pods[i], pvc) {
			log.V(4).Info("a pod listed from the API server uses the claim", "pod", klog.KObj(&live.pods[i]))
			return true, nil
		}
	}
	log.V(2).Info("the claim is unused")
	return false, nil
}

// usesForDeletion is the question of a deleted claim's finalizer: is pod bound to a node
// (the kubelet sees only those, and starts none with a claim being deleted) and names the
// claim in a persistentVolumeClaim volume, or, while it is not shut down, in a generic
// ephemeral volume whose claim is its own.
func usesForDeletion(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) bool {
	if pod.Spec.NodeName == "" {
		return false
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
			return true
		}
		if v.Ephemeral != nil && !shutDown(pod) && ownEphemeral(pod, v, pvc) {
			return true
		}
	}
	return false
}

// referencesForUnused is the question of the Unused condition: has pod not terminated and
// names the claim, directly or as its own ephemeral volume's claim (scheduled or not).
func referencesForUnused(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) bool {
	if terminated(pod) {
		return false
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name ||
			v.Ephemeral != nil && ownEphemeral(pod, v, pvc) {
			return true
		}
	}
	return false
}

// ownEphemeral reports whether pvc is the claim of pod's ephemeral volume v: named
// <pod>-<volume> and controlled by pod (a claim of that name that is not the pod's is no
// use of it).
func ownEphemeral(pod *corev1.Pod, v *corev1.Volume, pvc *corev1.PersistentVolumeClaim) bool {
	return ephemeral.VolumeClaimName(pod, v) == pvc.Name && ephemeral.VolumeIsForPod(pod, pvc) == nil
}

// shutDown reports whether the kubelet is done with pod, or it was force-deleted: it is
// being deleted with a zero grace period. Its ephemeral claim is then no longer in use,
// which also breaks a cycle of a pod finalizer waiting for the claim to go.
func shutDown(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
}

// terminated reports whether pod has finished (Succeeded or Failed), or is being deleted
// with no container running (each status terminated or waiting), as
// kube-controller-manager's volume utilities define it.
func terminated(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	return pod.DeletionTimestamp != nil && noneRunning(pod.Status.InitContainerStatuses) &&
		noneRunning(pod.Status.ContainerStatuses) && noneRunning(pod.Status.EphemeralContainerStatuses)
}

func noneRunning(statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil && s.State.Waiting == nil {
			return false
		}
	}
	return true
}

// deletionCandidate reports whether pvc is being deleted and still has the finalizer.
func deletionCandidate(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.DeletionTimestamp != nil && slices.Contains(pvc.Finalizers, Finalizer)
}

// needsFinalizer reports whether pvc is not being deleted and lacks the finalizer.
func needsFinalizer(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.DeletionTimestamp == nil && !slices.Contains(pvc.Finalizers, Finalizer)
}

func isUnused(c corev1.PersistentVolumeClaimCondition) bool {
	return c.Type == corev1.PersistentVolumeClaimUnused
}

// unusedCondition returns pvc's Unused condition, nil when it has none.
func unusedCondition(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaimCondition {
	if i := slices.IndexFunc(pvc.Status.Conditions, isUnused); i >= 0 {
		return &pvc.Status.Conditions[i]
	}
	return nil
}
