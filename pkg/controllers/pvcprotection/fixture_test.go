package pvcprotection

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose claim and pod caches the test fills
// by hand (the informers never run: a pod "the cache has not seen" is one only in api).
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...)}
	controllertest.StatusSubresource(f.Client, corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
	ctrl, err := newController(f.ControllerContext(), clocktesting.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(cached...)
	return f
}

// actions returns the fake client's requests as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Reads) }

// claim returns the API server's claim ns/name.
func (f *fixture) claim(name string) *corev1.PersistentVolumeClaim {
	return controllertest.Get[*corev1.PersistentVolumeClaim](f.T, f.Client, "ns", name)
}

type claimOpt func(*corev1.PersistentVolumeClaim)

// newClaim is a Pending claim ns/name with the protection finalizer (as the admission
// plugin creates it).
func newClaim(name string, opts ...claimOpt) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		UID: types.UID("uid-" + name), ResourceVersion: "1", Finalizers: []string{Finalizer}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	for _, o := range opts {
		o(c)
	}
	return c
}

func noFinalizer() claimOpt { return func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil } }

func finalizers(f ...string) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) { c.Finalizers = f }
}

func deleted() claimOpt {
	return func(c *corev1.PersistentVolumeClaim) {
		c.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	}
}

func bound() claimOpt {
	return func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimBound }
}

func unusedCond(s corev1.ConditionStatus) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Status.Conditions = append(c.Status.Conditions, corev1.PersistentVolumeClaimCondition{
			Type: corev1.PersistentVolumeClaimUnused, Status: s, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
	}
}

// ownedBy makes the claim controlled by pod (an ephemeral volume's claim).
func ownedBy(pod *corev1.Pod) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
}

type podOpt func(*corev1.Pod)

// newPod is a pod ns/name scheduled on node-1, Running.
func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// usesClaim gives the pod a persistentVolumeClaim volume "data" of claim.
func usesClaim(claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
}

// ephemeralVol gives the pod a generic ephemeral volume (its claim is <pod>-<volume>).
func ephemeralVol(volume string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}})
	}
}

func unscheduled() podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = "" } }

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// podDeleting marks the pod deleted with grace period seconds.
func podDeleting(grace int64) podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second)))
		p.DeletionGracePeriodSeconds = ptr.To(grace)
	}
}

// containerRunning gives the pod one running container status.
func containerRunning() podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
}

func uid(u string) podOpt { return func(p *corev1.Pod) { p.UID = types.UID(u) } }

// objs turns claims and pods into the objects a fixture takes.
func objs(os ...runtime.Object) []runtime.Object { return os }

func splitKey(key string) (string, string, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", fmt.Errorf("bad key %q", key)
	}
	return ns, name, nil
}
