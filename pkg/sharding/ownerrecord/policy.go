package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

const (
	// DefaultPartitionLabel is the Namespace label that holds the partition the
	// namespace's name hashes to; the coordinator's leader writes it on every Namespace,
	// and the policy asks the authorizer whether the requesting shard owns that partition.
	// Two kshard releases in one cluster need two labels (PolicyParams.PartitionLabel).
	DefaultPartitionLabel = "kshard.io/partition"

	// PodNameExtra is the user-info extra the API server adds for a pod-bound
	// (projected) ServiceAccount token: the name of the pod the token was issued to. A
	// shard's ID is its pod name, so this is the identity the API server vouches for and
	// the one whose owner subject the policy asks the authorizer about.
	PodNameExtra = "authentication.kubernetes.io/pod-name"

	// DefaultPolicyName names the ValidatingAdmissionPolicy and its binding. The chart
	// adds the release namespace (like the shard ClusterRole) so that two releases in
	// two namespaces do not fight over one cluster-scoped name.
	DefaultPolicyName = "kshard-shard-fence"

	// AuditAnnotationKey is the key of the audit annotation the policy adds to every
	// request it checks (the audit log shows it as "<policy name>/kshard_fence_decision"):
	// "shard=... namespace=... partition=...", so the fence's requests can be found in the
	// audit log; refused ones also carry the API server's validation_failure annotation. The API server's
	// apiserver_validating_admission_policy_check_total{policy=...,
	// enforcement_action="deny"} counts them too, without an audit log.
	AuditAnnotationKey = "kshard_fence_decision"

	// MessagePrefix starts every refusal message of the policy, so that a shard (and a
	// test) can tell a fence refusal from any other Forbidden error.
	MessagePrefix = "kshard shard fence:"
)

// PolicyParams name what the policy and its binding refer to.
type PolicyParams struct {
	// Name of the ValidatingAdmissionPolicy and of its binding (DefaultPolicyName when
	// empty).
	Name string
	// Namespace is kshard's namespace: the shard ServiceAccount's and the owner Roles'.
	Namespace string
	// ServiceAccount is the shard ServiceAccount's name; only its requests are fenced.
	ServiceAccount string
	// PartitionLabel is the Namespace label holding the namespace's partition
	// (DefaultPartitionLabel when empty).
	PartitionLabel string
	// ClusterPartition is the cluster partition's ID in decimal
	// (ClusterPartitionOf(partition map)): the partition whose owner works cluster-scoped
	// objects. The fence lets a shard update or delete a cluster-scoped object, a Namespace
	// included (its status and finalize subresources aside: they belong to the namespace's
	// own partition), only while its owner subject may own this partition. Required: a
	// policy without it refuses every such write.
	ClusterPartition string
	// CoordinatorUser is the user name the coordinator authenticates as (in a cluster,
	// ServiceAccountUser of the coordinator's ServiceAccount). The record guard
	// (RecordPolicy) lets only this user change the partition label of a Namespace (and
	// this user change nothing else on a Namespace) and write the owner Roles and their
	// RoleBindings. Install needs it; the fence policy and the Labeler do not read it.
	CoordinatorUser string
}

// ServiceAccountUser is the user name a ServiceAccount's tokens authenticate as.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// withDefaults fills the optional names.
func (p PolicyParams) withDefaults() PolicyParams {
	if p.Name == "" {
		p.Name = DefaultPolicyName
	}
	if p.PartitionLabel == "" {
		p.PartitionLabel = DefaultPartitionLabel
	}
	return p
}

// Validate reports parameters that would render a policy the API server rejects or one
// that fences nobody.
func (p PolicyParams) Validate() error {
	p = p.withDefaults()
	var errs []error
	for _, c := range []struct{ what, v string }{
		{"policy name", p.Name}, {"namespace", p.Namespace}, {"ServiceAccount", p.ServiceAccount},
	} {
		if msgs := validation.IsDNS1123Subdomain(c.v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", c.what, c.v, strings.Join(msgs, "; ")))
		}
	}
	if strings.ContainsAny(p.CoordinatorUser, `'\`) {
		errs = append(errs, fmt.Errorf("coordinator user %q: must not contain quotes or backslashes", p.CoordinatorUser))
	}
	if v, err := strconv.ParseUint(p.ClusterPartition, 10, 32); err != nil || v >= partition.MaxCount || strconv.FormatUint(v, 10) != p.ClusterPartition {
		errs = append(errs, fmt.Errorf("cluster partition %q: must be a partition ID in decimal (ownerrecord.ClusterPartitionOf)", p.ClusterPartition))
	}
	if msgs := validation.IsQualifiedName(p.PartitionLabel); len(msgs) > 0 || strings.ContainsAny(p.PartitionLabel, `'\`) {
		errs = append(errs, fmt.Errorf("partition label %q: %s", p.PartitionLabel, strings.Join(msgs, "; ")))
	}
	return errors.Join(errs...)
}

// ClusterPartitionOf is PolicyParams.ClusterPartition for partition map m: the partition
// of partition.ClusterKey, in decimal as owner Roles name it.
func ClusterPartitionOf(m partition.Map) string {
	return strconv.FormatUint(uint64(m.For(partition.ClusterKey)), 10)
}

// Username is the user name of the shard ServiceAccount, the only user the policy
// fences.
func (p PolicyParams) Username() string {
	return ServiceAccountUser(p.Namespace, p.ServiceAccount)
}

// ProbeUser is the user the coordinator's enforcement probe impersonates (with the
// pod-name extra of the shard it probes for): the fence policy treats it exactly as the
// shard ServiceAccount, and it may do nothing else. It is not a ServiceAccount and has no
// credentials: only impersonation reaches it. Its RBAC (ProbeClusterRole) is the creation
// of Events, and LimitsPolicy refuses every request of it but a dry-run Event create.
// Probing as this user instead of the shard ServiceAccount is what keeps the coordinator
// from acting as a shard: it may impersonate this user, never the shards' identity, whose
// RBAC reads every object of the cluster and deletes namespaced content.
func (p PolicyParams) ProbeUser() string {
	return "kshard:fence-probe:" + p.Namespace + ":" + p.ServiceAccount
}

// CEL pieces of the policy. Every lookup is guarded, so a missing label or extra
// evaluates to the empty string (and a refusal with a message that says which) rather
// than to an evaluation error. The partition label's key, kshard's namespace and the
// cluster partition are spliced in (Validate keeps quotes and backslashes out of them).
const (
	celShard = `has(request.userInfo.extra) && '` + PodNameExtra + `' in request.userInfo.extra && ` +
		`size(request.userInfo.extra['` + PodNameExtra + `']) > 0 ? request.userInfo.extra['` + PodNameExtra + `'][0] : ''`
	// celNamespaceObject: the request is a Namespace's own (namespaces, namespaces/status,
	// namespaces/finalize).
	celNamespaceObject = `request.resource.group == '' && request.resource.resource == 'namespaces'`
	// celNamespaceSubresource: the namespace controller's requests on a Namespace
	// (namespaces/status, namespaces/finalize), which belong to the namespace's partition,
	// like its content. The Namespace object itself is written by the garbage collector
	// only (owner references, finalizers), whose work on it is the cluster partition's.
	celNamespaceSubresource = celNamespaceObject + ` && has(request.subResource) && request.subResource != ''`
	// celInNamespace: a namespaced request (a cluster-scoped one has no request.namespace;
	// a Namespace's own carries its name there).
	celInNamespace = `has(request.namespace) && request.namespace != '' && !(` + celNamespaceObject + `)`
	// The partition a request belongs to, as the shard's gate maps it
	// (gate.RequestNamespace): a namespaced object's namespace's label (namespaceObject,
	// from the API server's Namespace informer), a Namespace's own label for its
	// subresources (the stored object: only the coordinator may change it), and the
	// cluster partition for every other cluster-scoped object, Namespaces themselves
	// included.
	celPartitionFmt = `(` + celInNamespace + `) ? (namespaceObject != null && has(namespaceObject.metadata.labels) && ` +
		`'%[1]s' in namespaceObject.metadata.labels ? namespaceObject.metadata.labels['%[1]s'] : '') : ` +
		`(` + celNamespaceSubresource + `) ? (oldObject != null && has(oldObject.metadata.labels) && ` +
		`'%[1]s' in oldObject.metadata.labels ? oldObject.metadata.labels['%[1]s'] : '') : '%[2]s'`
	// The owner record, asked of the API server's authorizer: may the shard's owner
	// subject (record.go) own the request's partition. An authorizer error is a
	// refusal (allowed() is false).
	celOwnsFmt = `variables.shard != '' && variables.partition != '' && ` +
		`authorizer.serviceAccount('%[1]s', '` + OwnerRolePrefix + `' + variables.shard).group('` + PartitionsGroup + `')` +
		`.resource('` + PartitionsResource + `').namespace('%[1]s').name(variables.partition).check('` + OwnVerb + `').allowed()`
	// Events are not fenced: the event recorder writes asynchronously and may write
	// after the reconcile (and the ownership) ended, harmlessly. Dry-run events are, so
	// that Prober can probe with an Event, which every shard may create.
	celEventsOnlyDryRun = `!(request.resource.resource == 'events' && ` +
		`(request.resource.group == '' || request.resource.group == 'events.k8s.io')) || ` +
		`(has(request.dryRun) && request.dryRun == true)`
	celWhat = `request.operation + ' ' + request.resource.resource + ` + celSubresource + ` + ` +
		`((` + celInNamespace + `) ? ' in namespace ' + request.namespace : ' ' + ` + celName + `)`
	celWhyFmt = `(variables.partition == '' ? 'the namespace has no %[1]s label yet, so no shard owns it' : ` +
		`((` + celInNamespace + `) || (` + celNamespaceSubresource + `) ? 'it does not own the namespace\'s partition ' + variables.partition : ` +
		`'it does not own the cluster partition ' + variables.partition + ', whose owner works cluster-scoped objects') + ` +
		`' (owner Roles ` + OwnerRolePrefix + `<shard> in namespace %[2]s)')`
	celMessageFmt = `'` + MessagePrefix + ` shard ' + (variables.shard != '' ? variables.shard : '<unknown: no ` + PodNameExtra + ` extra>') + ` +
		`' may not ' + ` + celWhat + ` + ': ' + ` + celWhyFmt
	// An audit annotation's value must be a string or null, and CEL cannot type a
	// conditional of null and a string, so the annotation is on every fenced request.
	// It cannot say which way it went: the API server evaluates audit annotations without
	// the authorizer ("no such attribute(s): authorizer"), so it names what the decision
	// was about; a refusal also carries the API server's own
	// validation.policy.admission.k8s.io/validation_failure annotation.
	celAudit = `'shard=' + variables.shard + ' namespace=' + (has(request.namespace) ? request.namespace : '') + ` +
		`' partition=' + variables.partition + ' operation=' + request.operation + ' resource=' + request.resource.resource`
)

// Policy returns the ValidatingAdmissionPolicy of the fence.
//
// It matches CREATE, UPDATE and DELETE of every namespaced resource and subresource
// (status updates are writes too), and UPDATE and DELETE of every cluster-scoped one, by
// the shard ServiceAccount and by the probe user (ProbeUser, which the coordinator's
// Prober impersonates) only (matchConditions): another client's write costs two string
// comparisons, nothing more. Events are left out by a match condition
// rather than by excludeResourceRules: real event writes are not fenced, dry-run ones
// are, which gives Prober a probe every shard is allowed by RBAC to send.
// A request passes when the API server's authorizer lets the shard's owner subject own
// the request's partition, the one the shard's own gate maps it to: the partition in the
// namespace's label (namespaceObject, from the API server's Namespace informer) for a
// namespaced object and a Namespace's subresources (its stored label: namespaces/status
// and namespaces/finalize, the namespace controller's), and PolicyParams.ClusterPartition
// for any other cluster-scoped object, Namespaces themselves included (the garbage
// collector's, whose queue keys of cluster-scoped objects are the cluster partition's).
// Shards create no cluster-scoped object (their RBAC grants none but access reviews,
// which change nothing), so cluster-scoped creates are not matched.
// The owner record is RBAC (record.go), read by the authorizer from
// the API server's own RBAC informers, which are synced before it serves. The policy has
// no params, which matters twice: with params, the API server resolves them before it
// evaluates matchConditions, for every matched request of every user (a missing param
// object costs a GET per request, and a param informer not synced within its second
// fails the request); and its param informers can freeze (kubernetes#130887). Without
// params, another user's write stops at the match conditions, which cannot fail, so
// failurePolicy Fail is safe for the cluster: a shard request the policy cannot evaluate
// is refused, never let through.
func Policy(p PolicyParams) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.withDefaults()
	fail := admissionregistrationv1.Fail
	namespaced, cluster := admissionregistrationv1.NamespacedScope, admissionregistrationv1.ClusterScope
	equivalent := admissionregistrationv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	changes := []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: writes,
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"*"}, APIVersions: []string{"*"},
							Resources: []string{"*/*"}, Scope: &namespaced, // every resource and subresource
						},
					},
				}, {
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: changes,
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"*"}, APIVersions: []string{"*"},
							Resources: []string{"*/*"}, Scope: &cluster,
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "shard-serviceaccount", Expression: "request.userInfo.username == '" + p.Username() + "' || request.userInfo.username == '" + p.ProbeUser() + "'"},
				{Name: "events-only-dry-run", Expression: celEventsOnlyDryRun},
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "shard", Expression: celShard},
				{Name: "partition", Expression: fmt.Sprintf(celPartitionFmt, p.PartitionLabel, p.ClusterPartition)},
				{Name: "owns", Expression: fmt.Sprintf(celOwnsFmt, p.Namespace)},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        `variables.owns`,
				MessageExpression: fmt.Sprintf(celMessageFmt, p.PartitionLabel, p.Namespace),
				Message:           MessagePrefix + " the shard does not own this namespace (or, for a cluster-scoped object, the cluster partition)",
				Reason:            &forbidden,
			}},
			AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{
				Key:             AuditAnnotationKey,
				ValueExpression: celAudit,
			}},
		},
	}
}

// Binding returns the fence's ValidatingAdmissionPolicyBinding, enforced with Deny.
func Binding(p PolicyParams) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindingFor(p.withDefaults().Name)
}

// bindingFor returns the Deny binding of the policy name, named like it.
func bindingFor(name string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// Install creates or updates the fence's policies and bindings (Policies, Bindings; each
// policy before its binding, so that no binding refers to a missing policy), the probe
// user's RBAC (ProbeClusterRole) and the coordinator's RBAC for the owner Roles in
// kshard's namespace (RecordRole, bound to p.CoordinatorUser by RecordRoleBinding), as
// the chart does; kshard's namespace must exist. From then on a shard may write only in
// namespaces whose partition its owner Role grants, only p.CoordinatorUser may change the
// partition labels and the owner Roles, and shards may delete no cluster-scoped object
// but a garbage collector's dependent (LimitsPolicy).
// p.CoordinatorUser is required. The coordinator's rights on Namespaces (get, list, watch,
// patch: the partition label) are the caller's to grant, as the chart's ClusterRole does.
func Install(ctx context.Context, client kubernetes.Interface, p PolicyParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.CoordinatorUser == "" {
		return errors.New("installing the fence: PolicyParams.CoordinatorUser is required (only that user may change the owner record)")
	}
	if err := installRecordRBAC(ctx, client, p); err != nil {
		return err
	}
	role, binding := ProbeClusterRole(p), ProbeClusterRoleBinding(p)
	if err := apply(ctx, client.RbacV1().ClusterRoles(), role, func(got, want *rbacv1.ClusterRole) { got.Rules = want.Rules }); err != nil {
		return err
	}
	if err := apply(ctx, client.RbacV1().ClusterRoleBindings(), binding, func(got, want *rbacv1.ClusterRoleBinding) {
		got.Subjects = want.Subjects // the roleRef is immutable, and always the same
	}); err != nil {
		return err
	}
	policies, bindings := Policies(p), Bindings(p)
	for i := range policies {
		if err := apply(ctx, client.AdmissionregistrationV1().ValidatingAdmissionPolicies(), policies[i],
			func(got, want *admissionregistrationv1.ValidatingAdmissionPolicy) { got.Spec = want.Spec }); err != nil {
			return err
		}
		if err := apply(ctx, client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings(), bindings[i],
			func(got, want *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { got.Spec = want.Spec }); err != nil {
			return err
		}
	}
	return nil
}

// object is what apply needs of a typed object.
type object interface {
	*admissionregistrationv1.ValidatingAdmissionPolicy | *admissionregistrationv1.ValidatingAdmissionPolicyBinding |
		*rbacv1.ClusterRole | *rbacv1.ClusterRoleBinding
	GetName() string
	GetObjectKind() schema.ObjectKind
}

// createGetUpdater is the part of a typed cluster-scoped client apply uses.
type createGetUpdater[T object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// apply creates want, or updates the object of its name with set.
func apply[T object](ctx context.Context, c createGetUpdater[T], want T, set func(got, want T)) error {
	kind := want.GetObjectKind().GroupVersionKind().Kind
	_, err := c.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s %s: %w", kind, want.GetName(), err)
	}
	got, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, want.GetName(), err)
	}
	set(got, want)
	if _, err := c.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, want.GetName(), err)
	}
	return nil
}

// Uninstall deletes what Install creates, bindings first (missing objects are fine). The
// owner Roles and their RoleBindings (the Labeler's) stay: they go with kshard's
// namespace.
func Uninstall(ctx context.Context, client kubernetes.Interface, p PolicyParams) error {
	ar := client.AdmissionregistrationV1()
	var errs []error
	keep := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, b := range Bindings(p) {
		keep(ar.ValidatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}))
	}
	for _, pol := range Policies(p) {
		keep(ar.ValidatingAdmissionPolicies().Delete(ctx, pol.Name, metav1.DeleteOptions{}))
	}
	keep(client.RbacV1().ClusterRoleBindings().Delete(ctx, ProbeClusterRoleBinding(p).Name, metav1.DeleteOptions{}))
	keep(client.RbacV1().ClusterRoles().Delete(ctx, ProbeClusterRole(p).Name, metav1.DeleteOptions{}))
	keep(uninstallRecordRBAC(ctx, client, p))
	return errors.Join(errs...)
}

// IsRefusal reports whether err is the API server refusing a request through the fence
// policy named policyName: a shard that is not the owner (the message starts with
// MessagePrefix after the API server's "ValidatingAdmissionPolicy '<name>' with binding
// ... denied request:"). RBAC refusals and other admission plugins' refusals do not
// count. A shard that sees it has lost the namespace's partition (or never had it) and
// must not retry the write.
func IsRefusal(err error, policyName string) bool {
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		return false
	}
	if policyName == "" {
		policyName = DefaultPolicyName
	}
	return strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policyName+"'")
}
