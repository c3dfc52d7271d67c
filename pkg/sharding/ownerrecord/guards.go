package ownerrecord

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// RecordPolicySuffix names the record guard (RecordPolicy): <fence name>-record.
	RecordPolicySuffix = "-record"
	// LimitsPolicySuffix names the shard limits (LimitsPolicy): <fence name>-limits.
	LimitsPolicySuffix = "-limits"
	// ProbeRoleSuffix names the probe user's ClusterRole and binding: <fence name>-probe.
	ProbeRoleSuffix = "-probe"

	// RecordMessagePrefix starts every refusal of the record guard.
	RecordMessagePrefix = "kshard owner record:"
	// LimitsMessagePrefix starts every refusal of the shard limits.
	LimitsMessagePrefix = "kshard shard limits:"
)

// RecordPolicyName is the name of the record guard's policy and binding.
func (p PolicyParams) RecordPolicyName() string { return p.withDefaults().Name + RecordPolicySuffix }

// LimitsPolicyName is the name of the shard limits' policy and binding.
func (p PolicyParams) LimitsPolicyName() string { return p.withDefaults().Name + LimitsPolicySuffix }

// Policies returns every ValidatingAdmissionPolicy of the fence, in the order Install
// creates them: the fence (Policy), the record guard (RecordPolicy) and the shard limits
// (LimitsPolicy). Bindings returns their bindings in the same order.
func Policies(p PolicyParams) []*admissionregistrationv1.ValidatingAdmissionPolicy {
	return []*admissionregistrationv1.ValidatingAdmissionPolicy{Policy(p), RecordPolicy(p), LimitsPolicy(p)}
}

// Bindings returns the Deny binding of each of Policies, in the same order.
func Bindings(p PolicyParams) []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		Binding(p), bindingFor(p.RecordPolicyName()), bindingFor(p.LimitsPolicyName()),
	}
}

// celKey is a CEL list holding the value of key in the metadata map field (labels or
// annotations) of the object variable obj, or an empty list when obj is null or has no
// such key: comparing two of them tells a change of the value, an addition and a removal
// apart from no change, and no lookup can fail.
func celKey(obj, field, key string) string {
	return fmt.Sprintf(`(%[1]s != null && has(%[1]s.metadata.%[2]s) && '%[3]s' in %[1]s.metadata.%[2]s ? [%[1]s.metadata.%[2]s['%[3]s']] : [])`, obj, field, key)
}

// celSameField is true when object and oldObject (both non-null) agree on the optional
// field path: both without it, or both with equal values.
func celSameField(path string) string {
	return fmt.Sprintf(`(has(object.%[1]s) == has(oldObject.%[1]s) && (!has(object.%[1]s) || object.%[1]s == oldObject.%[1]s))`, path)
}

// celSameMapExcept is true when the metadata map field of object and oldObject (both
// non-null) hold the same entries, key aside.
func celSameMapExcept(field, key string) string {
	return fmt.Sprintf(`(!has(object.metadata.%[1]s) || object.metadata.%[1]s.all(k, k == '%[2]s' || `+
		`(has(oldObject.metadata.%[1]s) && k in oldObject.metadata.%[1]s && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k]))) && `+
		`(!has(oldObject.metadata.%[1]s) || oldObject.metadata.%[1]s.all(k, k == '%[2]s' || (has(object.metadata.%[1]s) && k in object.metadata.%[1]s)))`, field, key)
}

// celSubresource is request.subResource with a leading slash, or "" for the resource itself.
const celSubresource = `(has(request.subResource) && request.subResource != '' ? '/' + request.subResource : '')`

// celName is request.name, or "" when the request has none (a lookup of it would fail).
const celName = `(has(request.name) ? request.name : '')`

// RecordPolicy returns the record guard: the ValidatingAdmissionPolicy that keeps the
// owner record (a Namespace's owner label and term annotation) the coordinator's alone.
//
// The fence policy (Policy) is scope Namespaced and never sees a Namespace, so without
// this guard a shard (whose namespace controller may update namespaces/status and
// namespaces/finalize), or anyone allowed to update Namespaces, could name any shard the
// owner of any namespace, or forge a term. It matches CREATE and UPDATE (PATCH and apply
// are updates) of namespaces and of every subresource of them, by every user, and refuses:
//
//   - a change of the owner label or of the term annotation (set, changed or removed;
//     on CREATE, present) by anyone but p.CoordinatorUser;
//   - any request of p.CoordinatorUser on a Namespace that is not an UPDATE of the
//     Namespace itself changing those two keys only: not a label or annotation beside
//     them (Pod Security labels included), not its spec, status, finalizers or owner
//     references, not a subresource, not a CREATE.
//
// failurePolicy is Fail, and it cannot break other users' namespace writes: the one
// match condition every namespace write meets is built of null checks, has() and `in`
// before each lookup, so it cannot fail; requests that touch neither key (and are not
// the coordinator's) stop there. What is evaluated further is a refusal either way (or
// the coordinator's own write). The admission attributes' object is the Namespace as it
// would be stored (after the subresource's strategy dropped what it ignores), so a
// status or finalize request is judged by what it would really change.
func RecordPolicy(p PolicyParams) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.withDefaults()
	fail := admissionregistrationv1.Fail
	cluster := admissionregistrationv1.ClusterScope
	equivalent := admissionregistrationv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	label, term := p.OwnerLabel, p.TermAnnotation()
	coordinator := `request.userInfo.username == '` + p.CoordinatorUser + `'`
	changed := celKey("object", "labels", label) + ` != ` + celKey("oldObject", "labels", label) + ` || ` +
		celKey("object", "annotations", term) + ` != ` + celKey("oldObject", "annotations", term)
	onlyRecord := `object != null && oldObject != null && ` + celSameField("spec") + ` && ` + celSameField("status") + ` && ` +
		celSameField("metadata.finalizers") + ` && ` + celSameField("metadata.ownerReferences") + ` && ` +
		celSameMapExcept("labels", label) + ` && ` + celSameMapExcept("annotations", term)
	what := `request.operation + ' namespaces' + ` + celSubresource + ` + ' ' + ` + celName
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.RecordPolicyName()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"*"},
							Resources: []string{"namespaces", "namespaces/*"}, Scope: &cluster, // status, finalize, any other
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "coordinator-or-owner-record-changed", Expression: coordinator + ` || ` + changed},
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "coordinator", Expression: coordinator},
				{Name: "what", Expression: what},
				{Name: "onlyRecordChanged", Expression: onlyRecord},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: `variables.coordinator`,
					MessageExpression: `'` + RecordMessagePrefix + ` only ` + p.CoordinatorUser + ` may change the Namespace label ` + label +
						` and annotation ` + term + `; ' + request.userInfo.username + ' may not (' + variables.what + ')'`,
					Message: RecordMessagePrefix + " only the kshard coordinator may change the owner label and term annotation of a Namespace",
					Reason:  &forbidden,
				},
				{
					Expression: `!variables.coordinator || (request.operation == 'UPDATE' && !(has(request.subResource) && request.subResource != '') && variables.onlyRecordChanged)`,
					MessageExpression: `'` + RecordMessagePrefix + ` the coordinator may change only the label ` + label + ` and the annotation ` + term +
						` of an existing Namespace, nothing else (' + variables.what + ')'`,
					Message: RecordMessagePrefix + " the coordinator may change only the owner label and term annotation of an existing Namespace",
					Reason:  &forbidden,
				},
			},
		},
	}
}

// LimitsPolicy returns the shard limits: the ValidatingAdmissionPolicy that takes from
// the shards' and the probe's identities what RBAC cannot.
//
//   - The shard ServiceAccount may not DELETE (nor deletecollection, which admission
//     sees as one DELETE per object) any cluster-scoped object, Namespaces included. The
//     namespace controller needs delete on */* for the content of a namespace being
//     deleted, and RBAC cannot take the cluster-scoped resources out of a wildcard; no
//     kshard controller deletes a cluster-scoped object (a garbage collector that does
//     would need an exception here). Admission never sends the API server's own
//     admission configuration (ValidatingAdmissionPolicies, their bindings, webhook
//     configurations) to a policy, so a shard can still delete the fence's own binding:
//     Checker detects that.
//   - The probe user (ProbeUser) may only create dry-run Events: the probe. Its RBAC
//     allows creating Events; this refuses the ones that would be stored.
//
// Other requests stop at the match condition (two string comparisons); failurePolicy Fail.
func LimitsPolicy(p PolicyParams) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.withDefaults()
	fail := admissionregistrationv1.Fail
	all := admissionregistrationv1.AllScopes
	equivalent := admissionregistrationv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	shard, probe := `request.userInfo.username == '`+p.Username()+`'`, `request.userInfo.username == '`+p.ProbeUser()+`'`
	// A cluster-scoped request has no request.namespace (a lookup of it fails); a
	// Namespace's own requests carry its name there.
	clusterScoped := `(!has(request.namespace) || request.namespace == '' || (request.resource.group == '' && request.resource.resource == 'namespaces'))`
	dryRunEventCreate := `request.operation == 'CREATE' && request.resource.group == '' && request.resource.resource == 'events' && ` +
		`!(has(request.subResource) && request.subResource != '') && has(request.dryRun) && request.dryRun == true`
	what := `request.operation + ' ' + request.resource.resource + ` + celSubresource + ` + ' ' + ` + celName + ` + ` +
		`(has(request.namespace) && request.namespace != '' && request.resource.resource != 'namespaces' ? ' in namespace ' + request.namespace : '')`
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.LimitsPolicyName()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update,
							admissionregistrationv1.Delete, admissionregistrationv1.Connect},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"*"}, APIVersions: []string{"*"},
							Resources: []string{"*/*"}, Scope: &all,
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "shard-cluster-delete-or-probe", Expression: `(` + shard + ` && request.operation == 'DELETE' && ` + clusterScoped + `) || ` + probe},
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "what", Expression: what},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression:        `!(` + probe + `) || (` + dryRunEventCreate + `)`,
					MessageExpression: `'` + LimitsMessagePrefix + ` the fence probe identity may only create dry-run Events, not ' + variables.what`,
					Message:           LimitsMessagePrefix + " the fence probe identity may only create dry-run Events",
					Reason:            &forbidden,
				},
				{
					Expression: `!(` + shard + `)`,
					MessageExpression: `'` + LimitsMessagePrefix + ` shard ' + (` + celShard + `) + ' may not ' + variables.what + ` +
						`': no kshard controller deletes cluster-scoped objects'`,
					Message: LimitsMessagePrefix + " shards may not delete cluster-scoped objects",
					Reason:  &forbidden,
				},
			},
		},
	}
}

// ProbeClusterRole is the probe user's only permission: creating Events, the dry-run
// probe (LimitsPolicy refuses the stored ones). ProbeClusterRoleBinding binds it.
func ProbeClusterRole(p PolicyParams) *rbacv1.ClusterRole {
	p = p.withDefaults()
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name + ProbeRoleSuffix},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}},
	}
}

// ProbeClusterRoleBinding binds ProbeClusterRole to the probe user.
func ProbeClusterRoleBinding(p PolicyParams) *rbacv1.ClusterRoleBinding {
	p = p.withDefaults()
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name + ProbeRoleSuffix},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: p.Name + ProbeRoleSuffix},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: p.ProbeUser()}},
	}
}
