package rootcacertpublisher

import (
	"maps"
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
	cms := schema.GroupResource{Resource: "configmaps"}
	terminating := controllertest.TerminatingNamespaceError(cms, "ns")
	for _, tc := range []struct {
		name        string
		cached      *corev1.ConfigMap
		api         *corev1.ConfigMap
		reactErr    error
		wantActions []string
		wantErr     bool
		// want are the data and annotations written, when something is.
		wantData        map[string]string
		wantAnnotations map[string]string
		wantLabels      map[string]string
	}{
		{name: "missing: created", wantActions: []string{"create configmaps ns/kube-root-ca.crt"},
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "as published: nothing", cached: rootCM("ns")},
		{name: "ca.crt edited: repaired", cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Data[DataKey] = "edited" }),
			api: rootCM("ns"), wantActions: []string{"update configmaps ns/kube-root-ca.crt"},
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "a key added: dropped", cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Data["extra"] = "x" }),
			api: rootCM("ns"), wantActions: []string{"update configmaps ns/kube-root-ca.crt"},
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "data removed: put back", cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Data = nil }),
			api: rootCM("ns"), wantActions: []string{"update configmaps ns/kube-root-ca.crt"},
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "annotation removed: put back, other annotations and labels kept",
			cached: rootCM("ns", func(cm *corev1.ConfigMap) {
				cm.Annotations = map[string]string{"team": "a"}
				cm.Labels = map[string]string{"l": "v"}
			}),
			api: rootCM("ns"), wantActions: []string{"update configmaps ns/kube-root-ca.crt"},
			wantData:        map[string]string{DataKey: bundle},
			wantAnnotations: map[string]string{DescriptionAnnotation: Description, "team": "a"}, wantLabels: map[string]string{"l": "v"}},
		{name: "annotation changed but not empty: left alone (upstream checks it is set)",
			cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Annotations[DescriptionAnnotation] = "mine" })},
		{name: "an extra annotation alone: left alone", cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Annotations["team"] = "a" })},
		{name: "cache behind the API server: AlreadyExists is retried", api: rootCM("ns"),
			wantActions: []string{"create configmaps ns/kube-root-ca.crt"}, wantErr: true,
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "namespace gone: not retried", reactErr: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"),
			wantActions: []string{"create configmaps ns/kube-root-ca.crt"},
			wantData:    map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "namespace terminating: not retried", reactErr: terminating,
			wantActions: []string{"create configmaps ns/kube-root-ca.crt"},
			wantData:    map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "other create errors are retried", reactErr: apierrors.NewServerTimeout(cms, "create", 1),
			wantActions: []string{"create configmaps ns/kube-root-ca.crt"}, wantErr: true,
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
		{name: "an update conflict is retried", cached: rootCM("ns", func(cm *corev1.ConfigMap) { cm.Data[DataKey] = "edited" }),
			reactErr:    apierrors.NewConflict(cms, ConfigMapName, nil),
			wantActions: []string{"update configmaps ns/kube-root-ca.crt"}, wantErr: true,
			wantData: map[string]string{DataKey: bundle}, wantAnnotations: map[string]string{DescriptionAnnotation: Description}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cached, api []runtime.Object
			if tc.cached != nil {
				cached = append(cached, tc.cached)
			}
			if tc.api != nil {
				api = append(api, tc.api)
			}
			f := newFixture(t, cached, api...)
			if tc.reactErr != nil {
				f.Client.PrependReactor("*", "configmaps", func(a core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.reactErr
				})
			}
			err := f.Sync("ns")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			w := f.written()
			if w == nil {
				return
			}
			if !maps.Equal(w.Data, tc.wantData) || !maps.Equal(w.Annotations, tc.wantAnnotations) || !maps.Equal(w.Labels, tc.wantLabels) {
				t.Errorf("wrote data %v annotations %v labels %v, want %v %v %v", w.Data, w.Annotations, w.Labels,
					tc.wantData, tc.wantAnnotations, tc.wantLabels)
			}
		})
	}
}

// An update keeps binaryData (upstream compares and writes data only) and the
// ConfigMap's resourceVersion (the update is conditional on the cached version).
func TestUpdateKeepsTheRest(t *testing.T) {
	cached := rootCM("ns", func(cm *corev1.ConfigMap) {
		cm.Data[DataKey] = "edited"
		cm.BinaryData = map[string][]byte{"b": {1}}
		cm.ResourceVersion = "7"
	})
	f := newFixture(t, []runtime.Object{cached}, rootCM("ns"))
	if err := f.Sync("ns"); err != nil {
		t.Fatal(err)
	}
	w := f.written()
	if w == nil || len(w.BinaryData["b"]) != 1 || w.ResourceVersion != "7" {
		t.Errorf("wrote %+v", w)
	}
	if cached.Data[DataKey] != "edited" {
		t.Error("the cached ConfigMap was modified")
	}
}

func TestSyncCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{name: "success", want: "200"},
		{name: "an API status", err: apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "x", nil), want: "409"},
		{name: "anything else", err: errString("connection refused"), want: "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := syncCode(tc.err); got != tc.want {
				t.Errorf("code %q, want %q", got, tc.want)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
