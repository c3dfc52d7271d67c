package podcontrol

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

var podsResource = schema.GroupResource{Resource: "pods"}

func owner() *corev1.ReplicationController {
	return &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"}}
}

func TestFromTemplate(t *testing.T) {
	ref := metav1.NewControllerRef(owner(), corev1.SchemeGroupVersion.WithKind("ReplicationController"))
	tests := []struct {
		name     string
		template corev1.PodTemplateSpec
		check    func(t *testing.T, pod *corev1.Pod)
	}{
		{
			name:     "nil maps become empty ones",
			template: corev1.PodTemplateSpec{},
			check: func(t *testing.T, pod *corev1.Pod) {
				if pod.Labels == nil || pod.Annotations == nil {
					t.Errorf("labels %v, annotations %v: want empty maps", pod.Labels, pod.Annotations)
				}
			},
		},
		{
			name: "template copied, owner and name set",
			template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}, Finalizers: []string{"f"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				if pod.Namespace != "ns" || pod.GenerateName != "web-" || pod.Labels["app"] != "web" || pod.Annotations["a"] != "b" ||
					len(pod.Finalizers) != 1 || len(pod.Spec.Containers) != 1 {
					t.Errorf("pod %+v", pod)
				}
				if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != "uid-web" || !*pod.OwnerReferences[0].Controller {
					t.Errorf("owner references %+v", pod.OwnerReferences)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := FromTemplate(&tc.template, "ns", "web-", ref)
			tc.check(t, pod)
			pod.Labels["changed"] = "x"
			if tc.template.Labels["changed"] != "" {
				t.Error("the pod shares its labels with the template")
			}
		})
	}
}

func TestGenerateNamePrefix(t *testing.T) {
	// The API server checks a prefix with its last two characters replaced by one (its
	// suffix is random), so a name of 253 characters still gets its dash.
	longest, tooLong := strings.Repeat("a", 253), strings.Repeat("a", 254)
	tests := []struct{ name, in, want string }{
		{name: "short name gets a dash", in: "web", want: "web-"},
		{name: "a dotted name", in: "web.v1", want: "web.v1-"},
		{name: "not a valid name: no dash", in: "a_b", want: "a_b"},
		{name: "longest name still gets a dash", in: longest, want: longest + "-"},
		{name: "a dash would be too long", in: tooLong, want: tooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := GenerateNamePrefix(tc.in); got != tc.want {
				t.Errorf("GenerateNamePrefix(%.20q…, %d chars) = %.20q…, %d chars, want %d", tc.in, len(tc.in), got, len(got), len(tc.want))
			}
		})
	}
}

func TestCreate(t *testing.T) {
	labelled := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "web-", Labels: map[string]string{"app": "web"}}}
	}
	terminating := apierrors.NewForbidden(podsResource, "", errors.New("namespace ns is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		createErr error
		wantErr   bool
		wantEvent string
	}{
		{name: "created", pod: labelled(), wantEvent: "Normal SuccessfulCreate Created pod: "},
		{name: "no labels", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}}, wantErr: true},
		{name: "refused", pod: labelled(), createErr: apierrors.NewForbidden(podsResource, "", errors.New("exceeded quota")), wantErr: true,
			wantEvent: "Warning FailedCreate Error creating: "},
		{name: "namespace terminating: no event", pod: labelled(), createErr: terminating, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.createErr != nil {
				client.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.createErr
				})
			}
			rec := record.NewFakeRecorder(10)
			created, err := Control{Client: client, Recorder: rec}.Create(context.Background(), owner(), tc.pod)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && created == nil {
				t.Error("no created pod returned")
			}
			checkEvent(t, rec, tc.wantEvent)
		})
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name         string
		existing     []runtime.Object
		deleteErr    error
		wantNotFound bool
		wantErr      bool
		wantEvent    string
	}{
		{name: "deleted", existing: []runtime.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"}}},
			wantEvent: "Normal SuccessfulDelete Deleted pod: web-1"},
		{name: "already gone: NotFound, no event", wantNotFound: true, wantErr: true},
		{name: "refused", deleteErr: apierrors.NewInternalError(errors.New("boom")), wantErr: true,
			wantEvent: "Warning FailedDelete Error deleting: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.existing...)
			if tc.deleteErr != nil {
				client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.deleteErr
				})
			}
			rec := record.NewFakeRecorder(10)
			err := Control{Client: client, Recorder: rec}.Delete(context.Background(), owner(), "ns", "web-1")
			if (err != nil) != tc.wantErr || apierrors.IsNotFound(err) != tc.wantNotFound {
				t.Fatalf("err %v, want error %v, NotFound %v", err, tc.wantErr, tc.wantNotFound)
			}
			checkEvent(t, rec, tc.wantEvent)
		})
	}
}

// checkEvent wants one event starting with want, or none when want is empty.
func checkEvent(t *testing.T, rec *record.FakeRecorder, want string) {
	t.Helper()
	select {
	case e := <-rec.Events:
		if want == "" || !strings.HasPrefix(e, want) {
			t.Errorf("event %q, want %q", e, want)
		}
	default:
		if want != "" {
			t.Errorf("no event, want %q", want)
		}
	}
}
