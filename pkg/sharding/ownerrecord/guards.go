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
// owner record (the owner Roles and RoleBindings in kshard's namespace, the term beacon,
// and every Namespace's partition label) the coordinator's alone, and the coordinator to
// the record.
//
// The fence policy (Policy) decides which shard may write, not what a write changes, and
// lets the owner of a namespace's partition update its namespaces/status and
// namespaces/finalize; RBAC lets the shards' namespace controller update those of every
// Namespace and delete any namespaced object; without this guard a shard, or anyone
// allowed to update Namespaces or RBAC in kshard's namespace, could move a namespace into
// another partition, grant a shard a partition or forge a term. It matches, by every user:
//
//   - CREATE and UPDATE (PATCH and apply are updates) of namespaces and every subresource
//     of them, and refuses a change of the partition label (set, changed or removed; on
//     CREATE, present) by anyone but p.CoordinatorUser, and any request of the coordinator
//     on a Namespace but an UPDATE of the Namespace itself changing that label only;
//   - CREATE, UPDATE and DELETE of Roles and RoleBindings in kshard's namespace that are
//     record objects (named OwnerRolePrefix+…, or TermRoleName), or of any RoleBinding
//     there or ClusterRoleBinding that binds an owner subject (a ServiceAccount named
//     OwnerRolePrefix+…), and refuses them to anyone but p.CoordinatorUser, except a
//     DELETE while kshard's namespace is terminating (the namespace controller empties
//     it); and refuses the coordinator any Role or RoleBinding there that is not a record
//     object of the record's shape (an owner rule with resourceNames, never without: that
//     would grant every partition).
//
// failurePolicy is Fail, and it cannot break other users' writes: the one match condition
// is built of null checks, has() and `in` before each lookup, so it cannot fail; requests
// that touch none of the above stop there. The admission attributes' object is the
// Namespace as it would be stored (after the subresource's strategy dropped what it
// ignores), so a status or finalize request is judged by what it would really change.
func RecordPolicy(p PolicyParams) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.withDefaults()
	fail := admissionregistrationv1.Fail
	all := admissionregistrationv1.AllScopes
	cluster := admissionregistrationv1.ClusterScope
	equivalent := admissionregistrationv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	label := p.PartitionLabel
	coordinator := `request.userInfo.username == '` + p.CoordinatorUser + `'`
	isNamespace := `(request.resource.group == '' && request.resource.resource == 'namespaces')`
	labelChanged := celKey("object", "labels", label) + ` != ` + celKey("oldObject", "labels", label)
	onlyLabel := `object != null && oldObject != null && ` + celSameField("spec") + ` && ` + celSameField("status") + ` && ` +
		celSameField("metadata.finalizers") + ` && ` + celSameField("metadata.ownerReferences") + ` && ` +
		celSameMapExcept("labels", label) + ` && ` + celSameMapExcept("annotations", "")
	inRecordNamespace := `(has(request.namespace) && request.namespace == '` + p.Namespace + `')`
	isRBAC := `request.resource.group == 'rbac.authorization.k8s.io'`
	recordName := `(` + celName + `.startsWith('` + OwnerRolePrefix + `') || (request.resource.resource == 'roles' && ` + celName + ` == '` + TermRoleName + `'))`
	// An owner subject is a ServiceAccount of kshard's namespace named OwnerRolePrefix+…;
	// the policy asks about permissions in kshard's namespace, which RoleBindings there
	// and ClusterRoleBindings grant (another release's owner subjects are its own).
	bindsOwnerIn := func(obj string) string {
		return `(` + obj + ` != null && has(` + obj + `.subjects) && ` + obj + `.subjects.exists(s, s.kind == 'ServiceAccount' && ` +
			`s.name.startsWith('` + OwnerRolePrefix + `') && has(s.namespace) && s.namespace == '` + p.Namespace + `'))`
	}
	isBinding := `((request.resource.resource == 'rolebindings' && ` + inRecordNamespace + `) || request.resource.resource == 'clusterrolebindings')`
	bindsOwner := `(` + isBinding + ` && (` + bindsOwnerIn("object") + ` || ` + bindsOwnerIn("oldObject") + `))`
	isRecordRBAC := `(` + isRBAC + ` && ((` + inRecordNamespace + ` && (request.resource.resource == 'roles' || request.resource.resource == 'rolebindings') && ` +
		`(` + recordName + ` || ` + coordinator + `)) || ` + bindsOwner + `))`
	terminating := `(request.operation == 'DELETE' && namespaceObject != null && has(namespaceObject.metadata.deletionTimestamp))`
	ownerRule := `r.apiGroups == ['` + PartitionsGroup + `'] && has(r.resources) && r.resources == ['` + PartitionsResource + `'] && ` +
		`r.verbs == ['` + OwnVerb + `'] && has(r.resourceNames) && size(r.resourceNames) > 0 && !has(r.nonResourceURLs)`
	// A Role without rules may come with rules absent or null (the API server stores an
	// empty list as null).
	noRules := `(!has(object.rules) || object.rules == null)`
	recordShape := recordName + ` && (request.operation == 'DELETE' || ` +
		`(request.resource.resource == 'roles' && (` + noRules + ` || object.rules.all(r, has(r.apiGroups) && ` + ownerRule + `)) && ` +
		`(` + celName + ` != '` + TermRoleName + `' || ` + noRules + ` || size(object.rules) == 0)) || ` +
		`(request.resource.resource == 'rolebindings' && object.roleRef.kind == 'Role' && object.roleRef.name == object.metadata.name && ` +
		`has(object.subjects) && size(object.subjects) == 1 && object.subjects[0].kind == 'ServiceAccount' && ` +
		`object.subjects[0].name == object.metadata.name && has(object.subjects[0].namespace) && object.subjects[0].namespace == '` + p.Namespace + `'))`
	whatNamespace := `request.operation + ' namespaces' + ` + celSubresource + ` + ' ' + ` + celName
	whatRBAC := `request.operation + ' ' + request.resource.resource + ' ' + ` + celName + ` + ` +
		`(has(request.namespace) && request.namespace != '' ? ' in namespace ' + request.namespace : '')`
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.RecordPolicyName()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: writes,
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"*"},
							Resources: []string{"namespaces", "namespaces/*"}, Scope: &cluster, // status, finalize, any other
						},
					}},
					{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: append(writes, admissionregistrationv1.Delete),
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"*"},
							Resources: []string{"roles", "rolebindings", "clusterrolebindings"}, Scope: &all,
						},
					}},
				},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "owner-record", Expression: `(` + isNamespace + ` && (` + coordinator + ` || ` + labelChanged + `)) || ` + isRecordRBAC},
			},
			Variables: []admissionregistrationv1.Variable{
				{Name: "coordinator", Expression: coordinator},
				{Name: "isNamespace", Expression: isNamespace},
				{Name: "what", Expression: `` + isNamespace + ` ? ` + whatNamespace + ` : ` + whatRBAC},
			},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression: `variables.coordinator || (!variables.isNamespace && ` + terminating + `)`,
					MessageExpression: `'` + RecordMessagePrefix + ` only ` + p.CoordinatorUser + ` may change the Namespace label ` + label +
						`, the owner Roles and RoleBindings (` + OwnerRolePrefix + `*) and the term beacon in namespace ` + p.Namespace +
						`, or bind an owner subject; ' + request.userInfo.username + ' may not (' + variables.what + ')'`,
					Message: RecordMessagePrefix + " only the kshard coordinator may change the owner record",
					Reason:  &forbidden,
				},
				{
					Expression: `!variables.coordinator || !variables.isNamespace || (request.operation == 'UPDATE' && !(has(request.subResource) && request.subResource != '') && ` + onlyLabel + `)`,
					MessageExpression: `'` + RecordMessagePrefix + ` the coordinator may change only the label ` + label +
						` of an existing Namespace, nothing else (' + variables.what + ')'`,
					Message: RecordMessagePrefix + " the coordinator may change only the partition label of an existing Namespace",
					Reason:  &forbidden,
				},
				{
					Expression: `!variables.coordinator || variables.isNamespace || (` + recordShape + `)`,
					MessageExpression: `'` + RecordMessagePrefix + ` the coordinator may write only owner Roles (one rule: ` + OwnVerb + ` ` +
						PartitionsResource + `.` + PartitionsGroup + ` with resourceNames), their RoleBindings (to the subject of their name) and the term beacon (no rules) (' + variables.what + ')'`,
					Message: RecordMessagePrefix + " the coordinator may write only owner Roles, their RoleBindings and the term beacon",
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
//     sees as one DELETE per object) a cluster-scoped object, Namespaces included, unless
//     it has owner references and is not a Namespace: the garbage collector deletes
//     cluster-scoped dependents whose owners are gone, and nothing else. The namespace
//     controller needs delete on */* for the content of a namespace being deleted, and
//     RBAC cannot take the cluster-scoped resources out of a wildcard.
//   - The shard ServiceAccount may UPDATE (or patch) a cluster-scoped object only to
//     remove owner references (or turn their blockOwnerDeletion off) and finalizers,
//     everything else unchanged: what the garbage collector writes (orphaning dependents,
//     finishing a foreground or orphan deletion); and the namespace controller's
//     namespaces/status and namespaces/finalize. The garbage collector's patch on */*
//     would otherwise let a shard rewrite webhook configurations, APIServices, CRDs or
//     labels of any Namespace; nor can a shard add an owner reference to an object and
//     then delete it as a dependent. Admission never sends the API server's own
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
	// What the garbage collector deletes: a dependent, never a Namespace.
	gcDependent := `oldObject != null && has(oldObject.metadata.ownerReferences) && size(oldObject.metadata.ownerReferences) > 0 && ` +
		`!(request.resource.group == '' && request.resource.resource == 'namespaces')`
	// What the shard updates: the namespace controller's namespaces/status and
	// namespaces/finalize, and the garbage collector's removal of owner references (or of
	// their blockOwnerDeletion) and finalizers, with nothing else changed (metadata's
	// resourceVersion and managedFields aside).
	namespaceSubresource := `request.resource.group == '' && request.resource.resource == 'namespaces' && ` +
		`has(request.subResource) && (request.subResource == 'status' || request.subResource == 'finalize')`
	free := `['ownerReferences', 'finalizers', 'managedFields', 'resourceVersion']`
	shrinkOnly := `!(has(request.subResource) && request.subResource != '') && object != null && oldObject != null && ` +
		`object.all(k, k == 'metadata' || (k in oldObject && object[k] == oldObject[k])) && ` +
		`oldObject.all(k, k == 'metadata' || k in object) && ` +
		`object.metadata.all(k, k in ` + free + ` || (k in oldObject.metadata && object.metadata[k] == oldObject.metadata[k])) && ` +
		`oldObject.metadata.all(k, k in ` + free + ` || k in object.metadata) && ` +
		`(!has(object.metadata.finalizers) || object.metadata.finalizers.all(f, has(oldObject.metadata.finalizers) && f in oldObject.metadata.finalizers)) && ` +
		`(!has(object.metadata.ownerReferences) || object.metadata.ownerReferences.all(r, has(oldObject.metadata.ownerReferences) && ` +
		`oldObject.metadata.ownerReferences.exists(o, o.uid == r.uid && o.apiVersion == r.apiVersion && o.kind == r.kind && o.name == r.name && ` +
		`(has(o.controller) ? o.controller : false) == (has(r.controller) ? r.controller : false) && ` +
		`(!(has(r.blockOwnerDeletion) && r.blockOwnerDeletion) || (has(o.blockOwnerDeletion) && o.blockOwnerDeletion)))))`
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
				{Name: "shard-cluster-delete-update-or-probe", Expression: `(` + shard + ` && (request.operation == 'DELETE' || request.operation == 'UPDATE') && ` +
					clusterScoped + `) || ` + probe},
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
					Expression: `!(` + shard + ` && request.operation == 'UPDATE') || (` + namespaceSubresource + `) || (` + shrinkOnly + `)`,
					MessageExpression: `'` + LimitsMessagePrefix + ` shard ' + (` + celShard + `) + ' may not ' + variables.what + ` +
						`': a shard may update a cluster-scoped object only to remove owner references or finalizers (the garbage collector), nothing else'`,
					Message: LimitsMessagePrefix + " shards may update a cluster-scoped object only to remove owner references or finalizers",
					Reason:  &forbidden,
				},
				{
					Expression: `!(` + shard + ` && request.operation == 'DELETE') || (` + gcDependent + `)`,
					MessageExpression: `'` + LimitsMessagePrefix + ` shard ' + (` + celShard + `) + ' may not ' + variables.what + ` +
						`': a shard deletes only cluster-scoped objects that have owner references (the garbage collector), and never a Namespace'`,
					Message: LimitsMessagePrefix + " shards may delete only cluster-scoped objects that have owner references, never a Namespace",
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
