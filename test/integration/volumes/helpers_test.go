package volumes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// finalizer is the PVC protection finalizer.
const finalizer = "kubernetes.io/pvc-protection"

// timeout bounds every wait for the controllers.
const timeout = 60 * time.Second

// env is one test's client and namespace.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace; a failed test logs the namespace's claims, pods
// and events first.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	e := &env{t: t, f: f, cs: f.Client}
	e.ns = f.Namespace(t, nil).Name
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	f.WaitDefaultServiceAccount(t, e.ns)
	return e
}

func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if l, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			fmt.Fprintf(&b, "claim %s uid=%s phase=%s deleting=%v finalizers=%v owners=%v\n", c.Name, c.UID, c.Status.Phase,
				c.DeletionTimestamp != nil, c.Finalizers, c.OwnerReferences)
		}
	}
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "pod %s uid=%s phase=%s node=%q deleting=%v\n", p.Name, p.UID, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range l.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s at %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason,
				ev.Count, ev.Source.Component, ev.LastTimestamp.Format(time.RFC3339), ev.Message)
		}
	}
	e.t.Log(b.String())
}

// claimSpec asks for 1Gi ReadWriteOnce of storage class class ("" for none).
func claimSpec(class string) corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: ptr.To(class),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// createClaim creates a claim of storage class class.
func (e *env) createClaim(name, class string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: claimSpec(class)}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating claim %s: %v", name, err)
	}
	return c
}

// claim returns the claim name, nil when it does not exist.
func (e *env) claim(ctx context.Context, name string) (*corev1.PersistentVolumeClaim, error) {
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return c, err
}

// waitClaim waits until the claim name exists and ok says yes.
func (e *env) waitClaim(what, name string, ok func(c *corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	var got *corev1.PersistentVolumeClaim
	framework.Eventually(e.t, timeout, fmt.Sprintf("claim %s/%s %s", e.ns, name, what), func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, name)
		if err != nil || c == nil {
			return false, err
		}
		got = c
		return ok(c), nil
	})
	return got
}

// waitClaimGone waits until no claim name is left (or one of another UID than old's).
func (e *env) waitClaimGone(name string, old types.UID) {
	e.t.Helper()
	framework.Eventually(e.t, timeout, fmt.Sprintf("claim %s/%s (uid %s) gone", e.ns, name, old), func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, name)
		return err == nil && (c == nil || c.UID != old), err
	})
}

// deleteClaim deletes the claim name.
func (e *env) deleteClaim(name string) {
	e.t.Helper()
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("deleting claim %s: %v", name, err)
	}
}

func hasFinalizer(c *corev1.PersistentVolumeClaim) bool {
	return slices.Contains(c.Finalizers, finalizer)
}

// podOpt changes a pod before it is created.
type podOpt func(*corev1.Pod)

// onNode binds the pod to a kwok node, as the scheduler would (a Pending claim keeps the
// scheduler from placing it).
func onNode(p *corev1.Pod) { p.Spec.NodeName = "kwok-node-0" }

// scheduled lets the scheduler place the pod on a kwok node.
func scheduled(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"type": "kwok"} }

// unschedulable keeps the pod Pending and unbound: no scheduler has its name.
func unschedulable(p *corev1.Pod) { p.Spec.SchedulerName = "kshard-e2e-nobody" }

// withClaim gives the pod a volume "data" of the claim.
func withClaim(claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
}

// withEphemeral gives the pod a generic ephemeral volume of the claim template tmpl.
func withEphemeral(volume string, tmpl corev1.PersistentVolumeClaimTemplate) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &tmpl}}})
	}
}

// createPod creates a pod (kwok's nodes tolerated, no grace period).
func (e *env) createPod(name string, opts ...podOpt) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
	}}
	for _, o := range opts {
		o(p)
	}
	p, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return p
}

// waitRunning waits until kwok runs the pod.
func (e *env) waitRunning(name string) {
	e.t.Helper()
	framework.Eventually(e.t, timeout, "pod "+e.ns+"/"+name+" Running", func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, err
	})
}

// deletePod deletes the pod and waits until it is gone.
func (e *env) deletePod(name string) {
	e.t.Helper()
	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("deleting pod %s: %v", name, err)
	}
	framework.Eventually(e.t, timeout, "pod "+e.ns+"/"+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
