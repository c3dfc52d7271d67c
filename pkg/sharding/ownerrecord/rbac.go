package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The coordinator's own RBAC for keeping the owner record (record.go), in kshard's
// namespace only: what the chart grants the coordinator ServiceAccount there (a test
// compares the chart's rendering with RecordRole and RecordRoleBinding), and what Install
// grants p.CoordinatorUser. The Namespaces' partition label is patched with the
// coordinator's cluster-wide rights on namespaces (get, list, watch, patch), which stay
// in the chart's ClusterRole: Namespaces are cluster-scoped.

// RecordRoleSuffix names the coordinator's record Role and its RoleBinding:
// <fence name>-record, in kshard's namespace (like the record guard's policy, which is
// cluster-scoped: the names do not collide).
const RecordRoleSuffix = RecordPolicySuffix

// RecordRoleName is the name of RecordRole and RecordRoleBinding.
func (p PolicyParams) RecordRoleName() string { return p.withDefaults().Name + RecordRoleSuffix }

// RecordRole returns the Role, in kshard's namespace (p.Namespace), that lets the
// coordinator keep the owner record there and nothing more:
//
//   - roles and rolebindings: get, list, watch, create, update, patch, delete. The
//     Labeler lists and watches the record (Roles and RoleBindings labelled
//     RecordLabel), reads and stamps the term beacon (TermRoleName), and creates, updates
//     and deletes one owner Role and one RoleBinding per shard. Their names carry shard IDs (pod names, new with
//     every rollout), so the rule cannot name them. It grants more than the record in
//     RBAC's terms only: the record guard (RecordPolicy) refuses the coordinator any Role
//     or RoleBinding in this namespace that is not a record object of the record's shape,
//     and the API server's escalation check refuses it any Role or binding granting more
//     than it holds itself. Neither escalate nor bind is granted, so that check applies.
//   - own on kshard.io partitions (every partition: no resourceNames). No API server
//     serves the resource, so it lets the coordinator do nothing; it is what the API
//     server's RBAC escalation check asks of whoever creates or updates an owner Role
//     (one rule, own on partitions with resourceNames) or binds one: without it the
//     coordinator could write no owner Role but the term beacon. It is bound to the
//     coordinator's ServiceAccount, never to an owner subject (a ServiceAccount named
//     OwnerRolePrefix+…), so the fence asks about no permission this grants.
//   - localsubjectaccessreviews (authorization.k8s.io): create. Fence.Apply waits, with
//     reviews in this namespace, until the authorizer lets a new owner's subject own its
//     partition and refuses the sentinel's: the authorizer the fence policy asks, from the
//     same RBAC informers. A review in a namespace is asked in that namespace, so the
//     cluster-scoped SubjectAccessReview (which could ask about any user anywhere) is not
//     needed.
func RecordRole(p PolicyParams) *rbacv1.Role {
	p = p.withDefaults()
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: p.RecordRoleName(), Namespace: p.Namespace},
		Rules: []rbacv1.PolicyRule{
			{
				APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
			},
			{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource}, Verbs: []string{OwnVerb}},
			{APIGroups: []string{authorizationv1.GroupName}, Resources: []string{"localsubjectaccessreviews"}, Verbs: []string{"create"}},
		},
	}
}

// RecordRoleBinding binds RecordRole to the coordinator, p.CoordinatorUser: its
// ServiceAccount when the user is one ("system:serviceaccount:<namespace>:<name>", as the
// chart's coordinator is), otherwise the user by name. It returns nil when
// p.CoordinatorUser is empty.
func RecordRoleBinding(p PolicyParams) *rbacv1.RoleBinding {
	p = p.withDefaults()
	if p.CoordinatorUser == "" {
		return nil
	}
	subject := rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: p.CoordinatorUser}
	if ns, name, ok := ServiceAccountOf(p.CoordinatorUser); ok {
		subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}
	}
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.RecordRoleName(), Namespace: p.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: p.RecordRoleName()},
		Subjects:   []rbacv1.Subject{subject},
	}
}

// ServiceAccountOf returns the namespace and name of the ServiceAccount a user name
// (ServiceAccountUser) authenticates, and whether it is one.
func ServiceAccountOf(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// installRecordRBAC creates or updates RecordRole and RecordRoleBinding (Install). A
// binding whose roleRef (immutable) is not RecordRole is replaced.
func installRecordRBAC(ctx context.Context, client kubernetes.Interface, p PolicyParams) error {
	role, binding := RecordRole(p), RecordRoleBinding(p)
	if binding == nil {
		return errors.New("the coordinator's record RBAC: PolicyParams.CoordinatorUser is required")
	}
	roles, bindings := client.RbacV1().Roles(role.Namespace), client.RbacV1().RoleBindings(binding.Namespace)
	what := "Role " + role.Namespace + "/" + role.Name
	if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		got, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading %s: %w", what, err)
		}
		got.Rules = role.Rules
		if _, err := roles.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating %s: %w", what, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating %s: %w", what, err)
	}
	what = "RoleBinding " + binding.Namespace + "/" + binding.Name
	_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		return nil
	}
	got, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	if got.RoleRef != binding.RoleRef {
		if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing %s (roleRef %s/%s): %w", what, got.RoleRef.Kind, got.RoleRef.Name, err)
		}
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		return nil
	}
	got.Subjects = binding.Subjects
	if _, err := bindings.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s: %w", what, err)
	}
	return nil
}

// uninstallRecordRBAC deletes RecordRoleBinding and RecordRole (Uninstall); missing ones
// are fine.
func uninstallRecordRBAC(ctx context.Context, client kubernetes.Interface, p PolicyParams) error {
	name, ns := p.RecordRoleName(), p.Namespace
	var errs []error
	if err := client.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting RoleBinding %s/%s: %w", ns, name, err))
	}
	if err := client.RbacV1().Roles(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting Role %s/%s: %w", ns, name, err))
	}
	return errors.Join(errs...)
}
