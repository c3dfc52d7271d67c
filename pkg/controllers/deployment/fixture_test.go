package deployment

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// now is the fake clock's time in every test.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ns = "ns"

// fixture is a controller on a fake clientset whose informer caches hold the test's
// objects (the informers never run; sample-controller style).
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

func newFixture(t testing.TB, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(now)}
	ctrl, err := newController(f.ControllerContext(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.syncKey
	f.Seed(objs...)
	return f
}

// sync runs one sync of the Deployment name.
func (f *fixture) sync(name string) error { return f.Sync(ns + "/" + name) }

func (f *fixture) mustSync(name string) {
	f.T.Helper()
	f.MustSync(ns + "/" + name)
}

// writes returns the client's write requests as "verb resource[/subresource] [name]".
func (f *fixture) writes() []string {
	return controllertest.Actions(f.Client, controllertest.ObjectNames)
}

// replicaSet reads a ReplicaSet from the fake API server.
func (f *fixture) replicaSet(name string) *appsv1.ReplicaSet {
	return controllertest.Get[*appsv1.ReplicaSet](f.T, f.Client, ns, name)
}

// deployment reads a Deployment from the fake API server.
func (f *fixture) deployment(name string) *appsv1.Deployment {
	return controllertest.Get[*appsv1.Deployment](f.T, f.Client, ns, name)
}

// newDeployment is a RollingUpdate Deployment as the API server defaults it (maxSurge and
// maxUnavailable 25%, revisionHistoryLimit 10, progressDeadlineSeconds 600).
func newDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1,
			Annotations: map[string]string{}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "image:1"}}},
			},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("25%")),
					MaxUnavailable: ptr.To(intstr.FromString("25%"))}},
			RevisionHistoryLimit:    ptr.To[int32](10),
			ProgressDeadlineSeconds: ptr.To[int32](600),
		},
	}
}

// withStrategy sets maxSurge and maxUnavailable.
func withStrategy(d *appsv1.Deployment, surge, unavailable intstr.IntOrString) *appsv1.Deployment {
	d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}
	return d
}

// recreate turns d into a Recreate Deployment.
func recreate(d *appsv1.Deployment) *appsv1.Deployment {
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	return d
}

// withImage gives d's template another image (a new revision).
func withImage(d *appsv1.Deployment, image string) *appsv1.Deployment {
	d.Spec.Template.Spec.Containers[0].Image = image
	return d
}

// newReplicaSet is a ReplicaSet of d for d's current template (change it for an old one),
// created age before now, with replicas pods all available and revision rev.
func newReplicaSet(d *appsv1.Deployment, name string, replicas int32, age time.Duration, rev int) *appsv1.ReplicaSet {
	tmpl := *d.Spec.Template.DeepCopy()
	tmpl.Labels = withLabel(tmpl.Labels, appsv1.DefaultDeploymentUniqueLabelKey, name)
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-" + name, Namespace: ns, UID: types.UID("uid-" + d.Name + "-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-age)), Labels: tmpl.Labels, Generation: 1,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, controllerKind)},
			Annotations: map[string]string{RevisionAnnotation: fmt.Sprint(rev),
				DesiredReplicasAnnotation: fmt.Sprint(*d.Spec.Replicas),
				MaxReplicasAnnotation:     fmt.Sprint(*d.Spec.Replicas + maxSurge(d))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		Status: appsv1.ReplicaSetStatus{Replicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
			ObservedGeneration: 1, TerminatingReplicas: ptr.To[int32](0)},
	}
}

// oldReplicaSet is a ReplicaSet of an earlier template of d (image "image:old-NAME").
func oldReplicaSet(d *appsv1.Deployment, name string, replicas int32, age time.Duration, rev int) *appsv1.ReplicaSet {
	rs := newReplicaSet(d, name, replicas, age, rev)
	rs.Spec.Template.Spec.Containers[0].Image = "image:old-" + name
	return rs
}

// withAvailable sets a ReplicaSet's available (and ready) replicas.
func withAvailable(rs *appsv1.ReplicaSet, available int32) *appsv1.ReplicaSet {
	rs.Status.AvailableReplicas, rs.Status.ReadyReplicas = available, available
	return rs
}

// synced marks d as already synced at revision rev: its revision annotation is set and it
// has a Progressing condition, so a sync writes nothing just for those.
func synced(d *appsv1.Deployment, rev string) *appsv1.Deployment {
	d.Annotations[RevisionAnnotation] = rev
	t := metav1.NewTime(now.Add(-time.Minute))
	d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionTrue, Reason: ReasonReplicaSetUpdated, LastUpdateTime: t, LastTransitionTime: t})
	return d
}

func (c *Controller) logForTest() klog.Logger { return klog.Background() }
