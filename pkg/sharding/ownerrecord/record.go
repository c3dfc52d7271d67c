package ownerrecord

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// The owner record is kept in RBAC, where the fence policy reads it through the API
// server's authorizer: shard S owns partition P when the ServiceAccount name
// OwnerRolePrefix+S of kshard's namespace (a subject no credential authenticates as;
// OwnerSubject) may OwnVerb PartitionsResource P of PartitionsGroup there. Each shard that
// owns anything has one Role (OwnerRoleName, its rule's resourceNames the partition IDs)
// and one RoleBinding of that name. Moving every partition of a shard is one Role write
// per shard involved, whatever the number of namespaces: the namespaces carry only their
// partition (PolicyParams.PartitionLabel), written once.
const (
	// OwnerRolePrefix starts the name of every owner Role and RoleBinding, followed by
	// the shard ID, and the name of the subject they bind.
	OwnerRolePrefix = "kshard-owner."
	// TermRoleName is the term beacon: a Role without rules whose TermAnnotation a new
	// leader stamps before it serves (Labeler.StampTerm), so that the record keeps the
	// term of a leadership that wrote no owner Role. It cannot be an owner Role's name
	// (no dot).
	TermRoleName = "kshard-owner-term"
	// RecordLabel marks the owner Roles, their RoleBindings and the term beacon, for
	// people and tools (kubectl get roles -l kshard.io/owner-record). The Labeler itself
	// finds the record by name (OwnerRolePrefix, TermRoleName), labelled or not: RBAC
	// grants by name.
	RecordLabel = "kshard.io/owner-record"
	// TermAnnotation holds, on each owner Role and on the term beacon, the coordinator
	// term that last wrote it.
	TermAnnotation = "kshard.io/owner-term"

	// PartitionsGroup, PartitionsResource and OwnVerb are the permission an owner Role
	// grants: no API server serves the resource; only the fence policy asks for it.
	PartitionsGroup    = "kshard.io"
	PartitionsResource = "partitions"
	OwnVerb            = "own"
)

// OwnerRoleName is the name of shard's owner Role and RoleBinding, and of the
// ServiceAccount subject the binding names.
func OwnerRoleName(shard string) string { return OwnerRolePrefix + shard }

// ValidateShardID reports a shard ID that cannot name an owner Role: the Role, its
// binding and its subject must be valid names.
func ValidateShardID(shard string) error {
	if msgs := validation.IsDNS1123Subdomain(OwnerRoleName(shard)); len(msgs) > 0 || shard == "" {
		return fmt.Errorf("shard ID %q cannot name an owner Role: %s", shard, strings.Join(msgs, "; "))
	}
	return nil
}

// ownerRole returns shard's owner Role granting partitions (which must not be empty: a
// rule without resourceNames would grant every partition), stamped with term.
func (p PolicyParams) ownerRole(shard string, partitions []partition.ID, term uint32) *rbacv1.Role {
	names := make([]string, len(partitions))
	for i, id := range partitions {
		names[i] = strconv.FormatUint(uint64(id), 10)
	}
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{
			Name: OwnerRoleName(shard), Namespace: p.Namespace,
			Labels:      map[string]string{RecordLabel: "true"},
			Annotations: map[string]string{TermAnnotation: strconv.FormatUint(uint64(term), 10)},
		},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource},
			Verbs: []string{OwnVerb}, ResourceNames: names,
		}},
	}
}

// ownerRoleBinding binds shard's owner Role to its subject.
func (p PolicyParams) ownerRoleBinding(shard string) *rbacv1.RoleBinding {
	name := OwnerRoleName(shard)
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: map[string]string{RecordLabel: "true"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: p.Namespace}},
	}
}

// isRecordName reports whether a Role of that name belongs to the record: an owner Role
// or the term beacon.
func isRecordName(name string) bool {
	_, ok := shardOf(name)
	return ok || name == TermRoleName
}

// shardOf returns the shard an owner Role's name names, and whether it is one.
func shardOf(roleName string) (string, bool) {
	s, ok := strings.CutPrefix(roleName, OwnerRolePrefix)
	return s, ok && s != ""
}

// partitionsOf returns the partitions of pm an owner Role grants, sorted. A rule that is
// not exactly the owner rule, or a resourceName that is not a partition of pm, grants
// nothing here (the Labeler rewrites such a Role from its table).
func partitionsOf(r *rbacv1.Role, pm partition.Map) []partition.ID {
	var out []partition.ID
	for _, rule := range r.Rules {
		if !isOwnerRule(rule) {
			continue
		}
		for _, n := range rule.ResourceNames {
			v, err := strconv.ParseUint(n, 10, 32)
			if err == nil && pm.Contains(partition.ID(v)) && strconv.FormatUint(v, 10) == n {
				out = append(out, partition.ID(v))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func isOwnerRule(r rbacv1.PolicyRule) bool {
	return slices.Equal(r.APIGroups, []string{PartitionsGroup}) && slices.Equal(r.Resources, []string{PartitionsResource}) &&
		slices.Equal(r.Verbs, []string{OwnVerb}) && len(r.ResourceNames) > 0 && len(r.NonResourceURLs) == 0
}

// termOf returns the term annotated on m (0 when none or not a term).
func termOf(m metav1.Object) uint32 {
	t, err := strconv.ParseUint(m.GetAnnotations()[TermAnnotation], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(t)
}
