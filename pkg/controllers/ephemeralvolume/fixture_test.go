package ephemeralvolume

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture is a controller on a fake clientset whose pod and claim caches the test fills
// by hand, its series in a registry of its own.
type fixture struct {
	*controllertest.Fixture
	ctrl *Controller
	reg  *prometheus.Registry
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []runtime.Object, api ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...), reg: prometheus.NewPedanticRegistry()}
	c := f.ControllerContext()
	c.Registerer = f.reg
	ctrl, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl.(*Controller), ctrl.(*Controller).sync
	f.Cache(cached...)
	return f
}

// actions returns the fake client's writes as "verb resource name".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.Client, controllertest.ObjectNames)
}

type podOpt func(*corev1.Pod)

// newPod is a pod ns/name with the given volumes.
func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// template is the volume claim template of the fixtures' ephemeral volumes.
func template() *corev1.PersistentVolumeClaimTemplate {
	return &corev1.PersistentVolumeClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "scratch"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("fast"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// ephemeralVol adds a generic ephemeral volume of the fixtures' template.
func ephemeralVol(volume string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: template()}}})
	}
}

// claimVol adds a persistentVolumeClaim volume.
func claimVol(volume, claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
}

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now())) }
}

// newClaim is a claim ns/name, controlled by owner when owner is not nil.
func newClaim(name string, owner *corev1.Pod) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	if owner != nil {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID,
			Controller: ptr.To(true)}}
	}
	return c
}

func objs(os ...runtime.Object) []runtime.Object { return os }
