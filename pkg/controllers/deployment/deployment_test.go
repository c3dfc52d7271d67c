package deployment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if _, err := controllers.NewRegistry(d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "deployment" || !d.OnByDefault || d.WorkersFlag != "concurrent-deployment-syncs" || d.DefaultWorkers != 5 {
		t.Errorf("descriptor = %+v", d)
	}
}

// TestEventHandlers checks which Deployments each informer event queues.
func TestEventHandlers(t *testing.T) {
	owner := newDeployment("owner", 1)
	other := newDeployment("other", 1)
	rec := recreate(newDeployment("rec", 1))
	owned := newReplicaSet(owner, "a", 1, 0, 1)
	recRS := newReplicaSet(rec, "a", 1, 0, 1)
	orphan := newReplicaSet(owner, "b", 1, 0, 1)
	orphan.OwnerReferences = nil
	foreign := newReplicaSet(owner, "c", 1, 0, 1)
	foreign.OwnerReferences[0].UID = "someone-else"
	released := owned.DeepCopy()
	released.ResourceVersion = "2"
	released.OwnerReferences = nil
	released.Labels = map[string]string{"app": "nobody"}
	tests := []struct {
		name  string
		event func(c *Controller)
		want  []string
	}{
		{name: "owned ReplicaSet added", event: func(c *Controller) { c.addReplicaSet(c.logForTest(), owned) }, want: []string{"ns/owner"}},
		{name: "orphan added: selecting Deployments", event: func(c *Controller) { c.addReplicaSet(c.logForTest(), orphan) }, want: []string{"ns/owner"}},
		{name: "ReplicaSet of an unknown owner", event: func(c *Controller) { c.addReplicaSet(c.logForTest(), foreign) }},
		{name: "resync ignored", event: func(c *Controller) { c.updateReplicaSet(c.logForTest(), owned, owned) }},
		{name: "released: old owner queued", event: func(c *Controller) { c.updateReplicaSet(c.logForTest(), owned, released) }, want: []string{"ns/owner"}},
		{name: "ReplicaSet deleted (tombstone)", event: func(c *Controller) {
			c.deleteReplicaSet(c.logForTest(), cache.DeletedFinalStateUnknown{Key: "ns/owner-a", Obj: owned})
		}, want: []string{"ns/owner"}},
		{name: "pod of a RollingUpdate Deployment deleted", event: func(c *Controller) { c.deletePod(podOf(owned, "p", corev1.PodRunning)) }},
		{name: "pod of a Recreate Deployment deleted", event: func(c *Controller) { c.deletePod(podOf(recRS, "p", corev1.PodRunning)) }, want: []string{"ns/rec"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, owner, other, rec, owned, recRS)
			tt.event(f.ctrl)
			if got := f.Queue.Keys(); !slices.Equal(got, tt.want) {
				t.Errorf("queued %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSelectingAll(t *testing.T) {
	d := newDeployment("d", 1)
	d.Generation = 2
	d.Spec.Selector = &metav1.LabelSelector{}
	f := newFixture(t, d)
	f.mustSync("d")
	if got, want := f.writes(), []string{"update deployments/status d"}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
	if g := f.deployment("d").Status.ObservedGeneration; g != 2 {
		t.Errorf("observedGeneration = %d, want 2", g)
	}
	want := "Warning SelectingAll This deployment is selecting all pods. A non-empty selector is required."
	if ev := f.Events(); !slices.Equal(ev, []string{want}) {
		t.Errorf("events = %q, want %q", ev, want)
	}
}

// TestClaim: orphans the selector matches are adopted, owned ones it no longer matches
// released, others' left alone.
func TestClaim(t *testing.T) {
	d := synced(newDeployment("d", 1), "1")
	orphan := newReplicaSet(d, "a", 1, 0, 1)
	orphan.OwnerReferences = nil
	mismatched := newReplicaSet(d, "b", 0, time.Hour, 1)
	mismatched.Labels = map[string]string{"app": "other"}
	foreign := newReplicaSet(d, "c", 0, time.Hour, 1)
	foreign.OwnerReferences[0].UID = "x"
	f := newFixture(t, d, orphan, mismatched, foreign)
	rss, err := f.ctrl.claimReplicaSets(f.TestContext(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(rss) != 1 || rss[0].Name != "d-a" {
		t.Errorf("claimed %d ReplicaSets, want d-a only", len(rss))
	}
	got := f.writes()
	slices.Sort(got) // the lister's order is random
	if want := []string{"patch replicasets d-a", "patch replicasets d-b"}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
}

// TestDeletingDeployment: only the status is synced.
func TestDeletingDeployment(t *testing.T) {
	d := withImage(newDeployment("d", 3), "image:2")
	d.DeletionTimestamp = &metav1.Time{Time: now}
	old := oldReplicaSet(d, "a", 3, time.Hour, 1)
	f := newFixture(t, d, old)
	f.mustSync("d")
	if got, want := f.writes(), []string{"update deployments/status d"}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
}

func TestSyncErrors(t *testing.T) {
	terminating := controllertest.TerminatingNamespaceError(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "ns")
	tests := []struct {
		name      string
		createErr error
		wantErr   bool
		wantEvent string
	}{
		{name: "namespace terminating: not retried", createErr: terminating},
		{name: "create fails: ReplicaSetCreateError", createErr: errors.New("quota"), wantErr: true,
			wantEvent: `Warning ReplicaSetCreateError Failed to create new replica set "d-` + templatehash.Compute(&newDeployment("d", 1).Spec.Template, nil) + `": quota`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 1)
			f := newFixture(t, d)
			f.Client.PrependReactor("create", "replicasets", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tt.createErr
			})
			err := f.sync("d")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantEvent == "" {
				return
			}
			if ev := f.Events(); !slices.Equal(ev, []string{tt.wantEvent}) {
				t.Errorf("events = %q, want %q", ev, tt.wantEvent)
			}
			c := getCondition(f.deployment("d").Status, appsv1.DeploymentProgressing)
			if c == nil || c.Reason != ReasonReplicaSetCreateError || c.Status != corev1.ConditionFalse {
				t.Errorf("Progressing = %+v, want False/ReplicaSetCreateError", c)
			}
		})
	}
}

func TestSyncMissingDeployment(t *testing.T) {
	f := newFixture(t)
	if err := f.sync("gone"); err != nil {
		t.Errorf("sync of a deleted Deployment: %v", err)
	}
	noReplicas := newDeployment("undefaulted", 1)
	noReplicas.Spec.Replicas = nil
	f.Cache(noReplicas)
	if err := f.sync("undefaulted"); err != nil || len(f.writes()) != 0 {
		t.Errorf("sync of a Deployment without spec.replicas: %v, writes %q", err, f.writes())
	}
	if err := f.ctrl.syncKey(context.Background(), "a/b/c"); err != nil {
		t.Errorf("invalid key: %v", err)
	}
}

// BenchmarkSyncSettled measures the sync of a settled Deployment with a full revision
// history: the work every resync and every unrelated ReplicaSet event costs.
func BenchmarkSyncSettled(b *testing.B) {
	d := newDeployment("d", 10)
	d.Annotations[RevisionAnnotation] = "11"
	objs := []runtime.Object{d}
	for i := range 10 {
		objs = append(objs, oldReplicaSet(d, fmt.Sprint("old", i), 0, time.Duration(20-i)*time.Hour, i+1))
	}
	objs = append(objs, newReplicaSet(d, "cur", 10, time.Minute, 11))
	f := newFixture(b, objs...)
	f.mustSync("d")
	f.Cache(f.deployment("d"))
	f.Client.ClearActions()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := f.ctrl.syncKey(ctx, ns+"/d"); err != nil {
			b.Fatal(err)
		}
	}
	if w := f.writes(); len(w) != 0 {
		b.Fatalf("a settled Deployment was written: %q", w)
	}
}

func BenchmarkPodTemplateHash(b *testing.B) {
	tmpl := newDeployment("d", 1).Spec.Template
	b.ReportAllocs()
	for b.Loop() {
		templatehash.Compute(&tmpl, nil)
	}
}
