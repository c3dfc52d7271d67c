package ephemeralvolume

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/web"

func TestSync(t *testing.T) {
	web := newPod("web", ephemeralVol("scratch"))
	for _, tc := range []struct {
		name      string
		cached    []runtime.Object
		api       []runtime.Object
		createErr error
		// wantActions are the writes; wantEvents the events recorded.
		wantActions  []string
		wantEvents   []string
		wantErr      bool
		wantAttempts float64
		wantFailures float64
	}{
		{name: "a pod not in the cache: nothing"},
		{name: "a pod without ephemeral volumes: nothing", cached: objs(newPod("web", claimVol("data", "data")))},
		{name: "a pod being deleted: nothing", cached: objs(newPod("web", ephemeralVol("scratch"), deleting()))},
		{name: "the claim is created", cached: objs(web),
			wantActions: []string{"create persistentvolumeclaims web-scratch"}, wantAttempts: 1},
		{name: "one claim per ephemeral volume, other volumes ignored",
			cached:      objs(newPod("web", ephemeralVol("a"), claimVol("data", "data"), ephemeralVol("b"))),
			wantActions: []string{"create persistentvolumeclaims web-a", "create persistentvolumeclaims web-b"}, wantAttempts: 2},
		{name: "the pod's claim exists: nothing", cached: objs(web, newClaim("web-scratch", web))},
		{name: "a claim of the name that is not the pod's: a Warning, retried",
			cached:     objs(web, newClaim("web-scratch", nil)),
			wantEvents: []string{"Warning FailedBinding ephemeral volume scratch: PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"},
			wantErr:    true},
		{name: "a claim controlled by another pod of the name (an earlier one) is not the pod's",
			cached:     objs(web, newClaim("web-scratch", newPod("web", func(p *corev1.Pod) { p.UID = "old" }))),
			wantEvents: []string{"Warning FailedBinding ephemeral volume scratch: PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"},
			wantErr:    true},
		{name: "the first failing volume stops the sync",
			cached:     objs(newPod("web", ephemeralVol("a"), ephemeralVol("b")), newClaim("web-a", nil)),
			wantEvents: []string{"Warning FailedBinding ephemeral volume a: PVC ns/web-a was not created for pod ns/web (pod is not owner)"},
			wantErr:    true},
		{name: "a failed create: a Warning, counted, retried", cached: objs(web), createErr: errors.New("boom"),
			wantActions: []string{"create persistentvolumeclaims web-scratch"},
			wantEvents:  []string{"Warning FailedBinding ephemeral volume scratch: create PVC web-scratch: boom"},
			wantErr:     true, wantAttempts: 1, wantFailures: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cached, tc.api...)
			if tc.createErr != nil {
				f.Client.PrependReactor("create", "persistentvolumeclaims", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.createErr
				})
			}
			if err := f.Sync(key); (err != nil) != tc.wantErr {
				t.Fatalf("sync error %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			if got := f.Events(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events %q, want %q", got, tc.wantEvents)
			}
			if got := testutil.ToFloat64(f.ctrl.creates.attempts); got != tc.wantAttempts {
				t.Errorf("create_total %v, want %v", got, tc.wantAttempts)
			}
			if got := testutil.ToFloat64(f.ctrl.creates.failures); got != tc.wantFailures {
				t.Errorf("create_failures_total %v, want %v", got, tc.wantFailures)
			}
		})
	}
}

// The created claim: named <pod>-<volume>, controlled by the pod (blockOwnerDeletion),
// the template's labels, annotations and spec.
func TestCreatedClaim(t *testing.T) {
	web := newPod("web", ephemeralVol("scratch"))
	f := newFixture(t, objs(web))
	f.MustSync(key)
	got := controllertest.Get[*corev1.PersistentVolumeClaim](t, f.Client, "ns", "web-scratch")
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: web.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	if len(got.OwnerReferences) != 1 || !apiequality.Semantic.DeepEqual(got.OwnerReferences[0], want) {
		t.Errorf("owner references %+v, want [%+v]", got.OwnerReferences, want)
	}
	tmpl := template()
	if !apiequality.Semantic.DeepEqual(got.Labels, tmpl.Labels) || !apiequality.Semantic.DeepEqual(got.Annotations, tmpl.Annotations) {
		t.Errorf("labels %v annotations %v, want the template's %v %v", got.Labels, got.Annotations, tmpl.Labels, tmpl.Annotations)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec, tmpl.Spec) {
		t.Errorf("spec %+v, want the template's %+v", got.Spec, tmpl.Spec)
	}
}

// The series are upstream's names, registered with the Context's registerer.
func TestMetricsRegistered(t *testing.T) {
	f := newFixture(t, objs(newPod("web", ephemeralVol("scratch"))))
	f.MustSync(key)
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	want := []string{"ephemeral_volume_controller_create_failures_total", "ephemeral_volume_controller_create_total"}
	if !slices.Equal(names, want) {
		t.Errorf("series %v, want %v", names, want)
	}
}

func TestHandlers(t *testing.T) {
	log := controllertest.Logger(t)
	for _, tc := range []struct {
		name   string
		cached []runtime.Object
		do     func(c *Controller)
		want   []string
	}{
		{name: "an added pod with an ephemeral volume", do: func(c *Controller) { c.podAdded(log, newPod("web", ephemeralVol("s"))) },
			want: []string{key}},
		{name: "an added pod without one", do: func(c *Controller) { c.podAdded(log, newPod("web", claimVol("d", "d"))) }},
		{name: "an added pod being deleted", do: func(c *Controller) { c.podAdded(log, newPod("web", ephemeralVol("s"), deleting())) }},
		{name: "a deleted claim queues the pods that name it",
			cached: objs(newPod("web", ephemeralVol("s")), newPod("other", ephemeralVol("s")), newPod("direct", claimVol("d", "web-s"))),
			do:     func(c *Controller) { c.claimDeleted(log, newClaim("web-s", nil)) },
			// direct names it but has no ephemeral volume: nothing to create for it.
			want: []string{key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cached)
			tc.do(f.ctrl)
			got := f.Queue.Keys()
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}
