package serviceaccount

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestSync(t *testing.T) {
	saResource := schema.GroupResource{Resource: "serviceaccounts"}
	terminatingCause := controllertest.TerminatingNamespaceError(saResource, "ns")
	for _, tc := range []struct {
		name        string
		cached      []runtime.Object
		api         []runtime.Object
		createErr   error
		wantActions []string
		wantErr     bool
	}{
		{name: "namespace not in the cache: nothing"},
		{name: "active namespace without the ServiceAccount: created", cached: []runtime.Object{active("ns")},
			wantActions: []string{"create serviceaccounts ns/default"}},
		{name: "ServiceAccount already cached: nothing", cached: []runtime.Object{active("ns"), serviceAccount("ns", "default")}},
		{name: "another ServiceAccount does not count", cached: []runtime.Object{active("ns"), serviceAccount("ns", "builder")},
			wantActions: []string{"create serviceaccounts ns/default"}},
		{name: "the default ServiceAccount of another namespace does not count",
			cached:      []runtime.Object{active("ns"), serviceAccount("other", "default")},
			wantActions: []string{"create serviceaccounts ns/default"}},
		{name: "terminating namespace: nothing", cached: []runtime.Object{namespace("ns", corev1.NamespaceTerminating)}},
		{name: "namespace without a phase: nothing", cached: []runtime.Object{namespace("ns", "")}},
		{name: "cache behind the API server: AlreadyExists is success", cached: []runtime.Object{active("ns")},
			api: []runtime.Object{serviceAccount("ns", "default")}, wantActions: []string{"create serviceaccounts ns/default"}},
		{name: "namespace began terminating: the refusal is success", cached: []runtime.Object{active("ns")},
			createErr: terminatingCause, wantActions: []string{"create serviceaccounts ns/default"}},
		{name: "other create errors are retried", cached: []runtime.Object{active("ns")},
			createErr:   apierrors.NewServerTimeout(saResource, "create", 1),
			wantActions: []string{"create serviceaccounts ns/default"}, wantErr: true},
		{name: "forbidden without the terminating cause is retried", cached: []runtime.Object{active("ns")},
			createErr:   apierrors.NewForbidden(saResource, "default", fmt.Errorf("no")),
			wantActions: []string{"create serviceaccounts ns/default"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cached, tc.api...)
			if tc.createErr != nil {
				f.Client.PrependReactor("create", "serviceaccounts", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.createErr
				})
			}
			err := f.Sync("ns")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
		})
	}
}

// The ServiceAccount created is upstream's: a name and the namespace, nothing else (no
// labels, annotations, secrets or automount setting).
func TestCreatedServiceAccount(t *testing.T) {
	f := newFixture(t, []runtime.Object{active("ns")})
	if err := f.Sync("ns"); err != nil {
		t.Fatal(err)
	}
	got, err := f.Client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("serviceaccounts"), "ns", "default")
	if err != nil {
		t.Fatal(err)
	}
	want := serviceAccount("ns", "default")
	if sa := got.(*corev1.ServiceAccount); !apiequal(sa, want) {
		t.Errorf("created %+v, want %+v", sa, want)
	}
	// The ServiceAccount the controller ensures is not changed by the create.
	if f.ctrl.ensure[0].Namespace != "" {
		t.Errorf("the controller's template was modified: namespace %q", f.ctrl.ensure[0].Namespace)
	}
}

func apiequal(a, b *corev1.ServiceAccount) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && len(a.Labels) == 0 && len(a.Annotations) == 0 &&
		len(a.Secrets) == 0 && len(a.ImagePullSecrets) == 0 && a.AutomountServiceAccountToken == nil
}
