package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers"
)

// authzClient answers SelfSubjectAccessReviews from allowed ("group/resource/subresource verb")
// and SelfSubjectReviews with user; reviewErr fails every access review.
func authzClient(user string, allowed map[string]bool, reviewErr error) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if reviewErr != nil {
			return true, nil, reviewErr
		}
		r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = allowed[ra.Group+"/"+ra.Resource+"/"+ra.Subresource+" "+ra.Verb]
		return true, r, nil
	})
	c.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: user}}}, nil
	})
	return c
}

func TestCheckPermissions(t *testing.T) {
	rs := controllers.Descriptor{Name: "replicaset", Permissions: []controllers.Permission{
		{Group: "apps", Resource: "replicasets", Verbs: []string{"list", "watch"}},
		{Group: "apps", Resource: "replicasets/status", Verbs: []string{"update"}},
	}}
	base := map[string]bool{"/namespaces/ list": true, "/namespaces/ watch": true,
		"/events/ create": true, "/events/ patch": true, "/events/ update": true}
	with := func(extra ...string) map[string]bool {
		m := map[string]bool{}
		for k := range base {
			m[k] = true
		}
		for _, e := range extra {
			m[e] = true
		}
		return m
	}
	tests := []struct {
		name      string
		enabled   []controllers.Descriptor
		allowed   map[string]bool
		reviewErr error
		wantErr   []string
	}{
		{name: "base only, granted", allowed: base},
		{name: "controller granted", enabled: []controllers.Descriptor{rs},
			allowed: with("apps/replicasets/ list", "apps/replicasets/ watch", "apps/replicasets/status update")},
		{name: "subresource missing", enabled: []controllers.Descriptor{rs},
			allowed: with("apps/replicasets/ list", "apps/replicasets/ watch"),
			wantErr: []string{`user "system:serviceaccount:ks:kshard-shard" lacks 1 permission(s)`,
				`controller replicaset needs "update" on apps/replicasets/status (cluster-wide)`, "--check-permissions=false"}},
		{name: "base missing", allowed: map[string]bool{},
			wantErr: []string{"lacks 5 permission(s)", `the shard itself needs "watch" on namespaces (cluster-wide)`}},
		{name: "review fails", reviewErr: errors.New("forbidden"),
			wantErr: []string{"checking permissions of user", "forbidden", "--check-permissions=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := authzClient("system:serviceaccount:ks:kshard-shard", tc.allowed, tc.reviewErr)
			err := CheckPermissions(context.Background(), c, RequiredPermissions(tc.enabled))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestRequiredPermissionsOrder(t *testing.T) {
	ds := []controllers.Descriptor{
		{Name: "b", Permissions: []controllers.Permission{{Resource: "pods", Verbs: []string{"watch", "list"}}}},
		{Name: "a", Permissions: []controllers.Permission{{Group: "apps", Resource: "deployments", Verbs: []string{"get"}}}},
	}
	var got []string
	for _, n := range RequiredPermissions(ds) {
		got = append(got, n.Owner+" "+n.Group+"/"+n.Resource+" "+n.Verb)
	}
	want := []string{
		"shard /events create", "shard /events patch", "shard /events update", "shard /namespaces list", "shard /namespaces watch",
		"a apps/deployments get", "b /pods list", "b /pods watch",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDescriptorsDoNotRepeatBasePermissions: what every shard is granted anyway (events
// for the recorders) is not a controller's to declare again.
func TestDescriptorsDoNotRepeatBasePermissions(t *testing.T) {
	base := map[string]bool{}
	for _, p := range BasePermissions() {
		for _, v := range p.Verbs {
			base[p.Group+"/"+p.Resource+" "+v] = true
		}
	}
	for _, d := range Descriptors() {
		for _, p := range d.Permissions {
			for _, v := range p.Verbs {
				if base[p.Group+"/"+p.Resource+" "+v] {
					t.Errorf("controller %s declares %s on %q/%s, which BasePermissions grant every shard", d.Name, v, p.Group, p.Resource)
				}
			}
		}
	}
}
