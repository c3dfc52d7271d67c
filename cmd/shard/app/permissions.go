package app

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/controllers"
)

// BaseOwner names the shard's own permissions (not a controller's) in messages and in
// the Helm chart's permissions table.
const BaseOwner = "shard"

// BasePermissions are what every shard needs whatever controllers run: the unfiltered
// namespace informer that maps namespaces to partitions, and the event broadcaster that
// the controllers' recorders write through.
func BasePermissions() []controllers.Permission {
	return []controllers.Permission{
		{Group: "", Resource: "namespaces", Verbs: []string{"list", "watch"}},
		{Group: "", Resource: "events", Verbs: []string{"create", "patch", "update"}},
	}
}

// Need is one verb on one resource that some part of the shard needs.
type Need struct {
	// Owner is BaseOwner or a controller's name.
	Owner    string
	Group    string
	Resource string
	Verb     string
}

// String reads as "controller replicaset needs update on apps/replicasets/status".
func (n Need) String() string {
	gr := n.Resource
	if n.Group != "" {
		gr = n.Group + "/" + n.Resource
	}
	who := "the shard itself"
	if n.Owner != BaseOwner {
		who = "controller " + n.Owner
	}
	return fmt.Sprintf("%s needs %q on %s (cluster-wide)", who, n.Verb, gr)
}

// RequiredPermissions lists, one verb per entry, what the base and the enabled controllers
// need, sorted by owner, group, resource and verb.
func RequiredPermissions(enabled []controllers.Descriptor) []Need {
	var out []Need
	add := func(owner string, ps []controllers.Permission) {
		for _, p := range ps {
			for _, v := range p.Verbs {
				out = append(out, Need{Owner: owner, Group: p.Group, Resource: p.Resource, Verb: v})
			}
		}
	}
	add(BaseOwner, BasePermissions())
	for _, d := range enabled {
		add(d.Name, d.AllPermissions())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Owner != b.Owner {
			return a.Owner == BaseOwner || (b.Owner != BaseOwner && a.Owner < b.Owner)
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Verb < b.Verb
	})
	return out
}

// CheckPermissions asks the API server, with one SelfSubjectAccessReview per need, whether
// the shard's identity may do everything needs lists, cluster-wide. A shard that started
// without them would only log 403s and never reconcile, so a missing one is a startup
// error that names the user, the controller, the verb and the resource.
func CheckPermissions(ctx context.Context, client kubernetes.Interface, needs []Need) error {
	var missing []Need
	for _, n := range needs {
		resource, sub, _ := strings.Cut(n.Resource, "/")
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: n.Group, Resource: resource, Subresource: sub, Verb: n.Verb,
			},
		}}
		got, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking permissions of %s as %s: %w (pass --check-permissions=false to skip the check)",
				whoAmI(ctx, client), n, err)
		}
		if !got.Status.Allowed {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	lines := make([]string, 0, len(missing))
	for _, n := range missing {
		lines = append(lines, "  "+n.String())
	}
	return fmt.Errorf("%s lacks %d permission(s) the shard needs:\n%s\n"+
		"grant them (the Helm chart's shard ClusterRole does for the controllers in its values), "+
		"disable the controllers that need them with --controllers, or pass --check-permissions=false to skip this check",
		whoAmI(ctx, client), len(missing), strings.Join(lines, "\n"))
}

// whoAmI names the authenticated user (e.g. a ServiceAccount) for messages, through a
// SelfSubjectReview; when that fails the message still reads.
func whoAmI(ctx context.Context, client kubernetes.Interface) string {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "the shard's user (unknown: SelfSubjectReview failed)"
	}
	return fmt.Sprintf("user %q", r.Status.UserInfo.Username)
}
