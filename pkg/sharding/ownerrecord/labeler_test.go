package ownerrecord

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

const (
	forgedTerm  = "4294967295" // no coordinator can have led it yet (leader.PlausibleTerm)
	forgedTerm2 = "4000000000"
)

// TestLabelerActivate: a new leader reads the owner Roles (with a live LIST, writing
// nothing) and takes what they grant as its owner table: a partition granted by two Roles,
// by a rule that is not exactly the owner rule, or named by a resourceName that is not a
// partition of the map, has no owner. It reports the highest plausible term of the owner
// Roles and the term beacon, and counts the forged ones apart; a plausible term above its
// own leaves it inactive.
func TestLabelerActivate(t *testing.T) {
	tests := []struct {
		name       string
		rbac       []runtime.Object
		term       uint32
		want       Claimed
		wantActive bool
	}{
		{name: "no record", term: 1, want: Claimed{Owners: map[partition.ID]string{}}, wantActive: true},
		{name: "owners from Roles", term: 4, rbac: []runtime.Object{
			ownerRoleOf("a", "3", "11", 0, 1), ownerRoleOf("b", "2", "12", 2), ownerBindingOf("a", "13"), ownerBindingOf("b", "14"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 1: "a", 2: "b"}, HighestTerm: 3, HighestIn: OwnerRolePrefix + "a"}, wantActive: true},
		{name: "a partition granted by two or three Roles has no owner", term: 4, rbac: []runtime.Object{
			ownerRoleOf("a", "1", "11", 0, 1), ownerRoleOf("b", "1", "12", 1, 2), ownerRoleOf("c", "1", "13", 1),
			ownerRoleOf("d", "1", "14", 3), ownerRoleOf("e", "1", "15", 3),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 2: "b"}, HighestTerm: 1, HighestIn: OwnerRolePrefix + "a"}, wantActive: true},
		{name: "a rule that is not the owner rule grants nothing", term: 4, rbac: []runtime.Object{
			recordRole(OwnerRolePrefix+"a", "1", "11", ownerRule("0"),
				rbacv1.PolicyRule{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource}, Verbs: []string{OwnVerb, "get"}, ResourceNames: []string{"1"}}),
			recordRole(OwnerRolePrefix+"b", "1", "12",
				rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{PartitionsResource}, Verbs: []string{OwnVerb}, ResourceNames: []string{"2"}}),
			recordRole(OwnerRolePrefix+"c", "1", "13",
				rbacv1.PolicyRule{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource, "namespaces"}, Verbs: []string{OwnVerb}, ResourceNames: []string{"3"}}),
			recordRole(OwnerRolePrefix+"d", "1", "14",
				rbacv1.PolicyRule{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource}, Verbs: []string{OwnVerb}, ResourceNames: []string{"4"}, NonResourceURLs: []string{"/x"}}),
			recordRole(OwnerRolePrefix+"e", "1", "15", ownerRule()), // no resourceNames: RBAC grants every partition
			recordRole(OwnerRolePrefix+"f", "1", "16",
				rbacv1.PolicyRule{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource}, Verbs: []string{"*"}, ResourceNames: []string{"6"}}),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a"}, HighestTerm: 1, HighestIn: OwnerRolePrefix + "a"}, wantActive: true},
		{name: "a resourceName that is not a partition of the map grants nothing", term: 4, rbac: []runtime.Object{
			ownerRoleOf("a", "1", "11", 2, 8, 4294967296),
			recordRole(OwnerRolePrefix+"b", "1", "12", ownerRule("03", "-4", "x", " 5", "+6", "7 ", "")),
		}, want: Claimed{Owners: map[partition.ID]string{2: "a"}, HighestTerm: 1, HighestIn: OwnerRolePrefix + "a"}, wantActive: true},
		{name: "Roles that are not owner Roles grant nothing", term: 4, rbac: []runtime.Object{
			recordRole("other", "1", "11", ownerRule("0")),
			recordRole(OwnerRolePrefix, "1", "12", ownerRule("1")), // no shard
			recordRole(TermRoleName, "1", "13", ownerRule("2")),
		}, want: Claimed{Owners: map[partition.ID]string{}, HighestTerm: 1, HighestIn: TermRoleName}, wantActive: true}, // sorts first
		{name: "the highest term on an owner Role", term: 7, rbac: []runtime.Object{
			ownerRoleOf("a", "5", "11", 0), ownerRoleOf("b", "6", "12", 1), recordRole(TermRoleName, "4", "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 1: "b"}, HighestTerm: 6, HighestIn: OwnerRolePrefix + "b"}, wantActive: true},
		{name: "the highest term on the beacon", term: 7, rbac: []runtime.Object{
			ownerRoleOf("a", "3", "11", 0), recordRole(TermRoleName, "6", "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a"}, HighestTerm: 6, HighestIn: TermRoleName}, wantActive: true},
		{name: "the activating term itself is not above", term: 7, rbac: []runtime.Object{
			ownerRoleOf("a", "7", "11", 0), recordRole(TermRoleName, "7", "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a"}, HighestTerm: 7, HighestIn: TermRoleName}, wantActive: true},
		{name: "plausible terms above the activating one", term: 7, rbac: []runtime.Object{
			ownerRoleOf("a", "8", "11", 0), ownerRoleOf("b", "9", "12", 1), recordRole(TermRoleName, "5", "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 1: "b"}, HighestTerm: 9, HighestIn: OwnerRolePrefix + "b", Above: 2}},
		{name: "a plausible term above on the beacon only", term: 7, rbac: []runtime.Object{
			ownerRoleOf("a", "3", "11", 0), recordRole(TermRoleName, "8", "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a"}, HighestTerm: 8, HighestIn: TermRoleName, Above: 1}},
		{name: "forged terms are counted apart", term: 8, rbac: []runtime.Object{
			ownerRoleOf("a", forgedTerm, "11", 0), ownerRoleOf("b", forgedTerm2, "12", 1), ownerRoleOf("c", "7", "13", 2),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 1: "b", 2: "c"}, HighestTerm: 7, HighestIn: OwnerRolePrefix + "c",
			Forged: 2, ForgedIn: OwnerRolePrefix + "a"}, wantActive: true},
		{name: "a forged term on the beacon", term: 4, rbac: []runtime.Object{
			ownerRoleOf("a", "3", "11", 0), recordRole(TermRoleName, forgedTerm, "13"),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a"}, HighestTerm: 3, HighestIn: OwnerRolePrefix + "a",
			Forged: 1, ForgedIn: TermRoleName}, wantActive: true},
		{name: "a term that is not a number", term: 2, rbac: []runtime.Object{
			ownerRoleOf("a", "x9", "11", 0), ownerRoleOf("b", "", "12", 1),
		}, want: Claimed{Owners: map[partition.ID]string{0: "a", 1: "b"}}, wantActive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{rbac: tt.rbac})
			got := f.activate(tt.term, certain)
			if !maps.Equal(got.Owners, tt.want.Owners) || got.HighestTerm != tt.want.HighestTerm || got.HighestIn != tt.want.HighestIn ||
				got.Above != tt.want.Above || got.Forged != tt.want.Forged || got.ForgedIn != tt.want.ForgedIn {
				t.Errorf("Activate(%d) = %+v, want %+v", tt.term, got, tt.want)
			}
			active, term, _, owners := f.l.snapshot()
			if active != tt.wantActive {
				t.Errorf("active = %t after Activate, want %t", active, tt.wantActive)
			}
			if active && (term != tt.term || !maps.Equal(owners, tt.want.Owners)) {
				t.Errorf("the Labeler is active at term %d with table %v, want term %d and table %v", term, owners, tt.term, tt.want.Owners)
			}
			listed := false
			for _, a := range f.kube.Actions() {
				listed = listed || (a.GetVerb() == "list" && a.GetResource().Resource == "roles" && a.GetNamespace() == testNamespace)
			}
			if !listed {
				t.Error("Activate did not LIST the Roles of kshard's namespace")
			}
			if w := f.rbacWrites(); len(w) > 0 {
				t.Errorf("Activate wrote %v", w)
			}
		})
	}
}

// TestLabelerActivateBehindTerm: a Labeler that found a plausible term above its own
// stays inactive: Set and StampTerm fail and write nothing; Activate again at a term
// above it activates it.
func TestLabelerActivateBehindTerm(t *testing.T) {
	f := newFixture(t, setup{rbac: []runtime.Object{ownerRoleOf("a", "9", "11", 0, 1), ownerBindingOf("a", "12")}})
	if c := f.activate(7, certain); c.HighestTerm != 9 {
		t.Fatalf("Activate(7) = %+v, want HighestTerm 9", c)
	}
	if _, err := f.l.Set(f.ctx, map[partition.ID]string{1: "b"}); err == nil {
		t.Error("Set succeeded on a Labeler that found a term above its own")
	}
	if err := f.l.StampTerm(f.ctx); err == nil {
		t.Error("StampTerm succeeded on a Labeler that found a term above its own")
	}
	f.repairRoles()
	if w := f.rbacWrites(); len(w) > 0 {
		t.Fatalf("an inactive Labeler wrote %v", w)
	}
	f.activate(10, certain)
	if _, err := f.l.Set(f.ctx, map[partition.ID]string{1: "b"}); err != nil {
		t.Fatalf("Set at term 10: %v", err)
	}
	if got := f.roles(); !maps.EqualFunc(got, map[string][]int{"a": {0}, "b": {1}}, slices.Equal) {
		t.Errorf("owner Roles %v after the move at term 10, want a [0] b [1]", got)
	}
}

// setCase is one Set of TestLabelerSet.
type setCase struct {
	name string
	rbac []runtime.Object
	// afterActivate changes the record between Activate and Set.
	afterActivate func(*fixture)
	batch         map[partition.ID]string
	wantRoles     map[string][]int // shard → partitions its owner Role grants
	wantBindings  []string         // shards with a RoleBinding
	// wantRoleWrites lists, for some owner Roles, the partitions each write of it granted,
	// in order (nil for a delete).
	wantRoleWrites map[string][][]int
	// wantRV holds, for "roles/<name>" or "rolebindings/<name>", the resourceVersion the
	// first write of it carried (an update's, or a delete's precondition).
	wantRV     map[string]string
	wantWrites int
	wantGained map[string][]partition.ID
}

// TestLabelerSet: Set writes the owner Roles the table says, every removal before any
// grant (no partition is ever granted by a Role while another still grants it), deletes a
// Role left empty and its RoleBinding, creates a RoleBinding for a new owner, writes no
// rule without resourceNames, stamps its term on every Role it writes (also over a Role of
// a higher term), and sends every update and delete with the listed resourceVersion as
// precondition.
func TestLabelerSet(t *testing.T) {
	const term = 7
	tests := []setCase{
		{
			name:         "a move of one partition from A to B",
			rbac:         []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")},
			batch:        map[partition.ID]string{1: "b"},
			wantRoles:    map[string][]int{"a": {0}, "b": {1}},
			wantBindings: []string{"a", "b"},
			wantRoleWrites: map[string][][]int{
				"a": {{0}},
				"b": {{1}},
			},
			wantRV:     map[string]string{"roles/" + OwnerRolePrefix + "a": "11"},
			wantWrites: 3, // update a, create b, create b's binding
			wantGained: map[string][]partition.ID{"b": {1}},
		},
		{
			name:           "A loses its last partition to B",
			rbac:           []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerBindingOf("a", "12")},
			batch:          map[partition.ID]string{0: "b"},
			wantRoles:      map[string][]int{"b": {0}},
			wantBindings:   []string{"b"},
			wantRoleWrites: map[string][][]int{"a": {nil}, "b": {{0}}},
			wantRV:         map[string]string{"roles/" + OwnerRolePrefix + "a": "11", "rolebindings/" + OwnerRolePrefix + "a": "12"},
			wantWrites:     4, // delete a, create b, create b's binding, delete a's binding
			wantGained:     map[string][]partition.ID{"b": {0}},
		},
		{
			name: "A and B swap a partition each",
			rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 2), ownerRoleOf("b", "3", "12", 1, 3),
				ownerBindingOf("a", "13"), ownerBindingOf("b", "14")},
			batch:        map[partition.ID]string{0: "b", 1: "a"},
			wantRoles:    map[string][]int{"a": {1, 2}, "b": {0, 3}},
			wantBindings: []string{"a", "b"},
			wantRoleWrites: map[string][][]int{
				"a": {{2}, {1, 2}}, // first without what it loses, then with what it gains
				"b": {{3}, {0, 3}},
			},
			wantRV:     map[string]string{"roles/" + OwnerRolePrefix + "a": "11", "roles/" + OwnerRolePrefix + "b": "12"},
			wantWrites: 4,
			wantGained: map[string][]partition.ID{"a": {1}, "b": {0}},
		},
		{
			name: "A and B swap all they own",
			rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerRoleOf("b", "3", "12", 1),
				ownerBindingOf("a", "13"), ownerBindingOf("b", "14")},
			batch:          map[partition.ID]string{0: "b", 1: "a"},
			wantRoles:      map[string][]int{"a": {1}, "b": {0}},
			wantBindings:   []string{"a", "b"},
			wantRoleWrites: map[string][][]int{"a": {nil, {1}}, "b": {nil, {0}}},
			wantWrites:     4, // both deleted, then both created; the bindings stay
			wantGained:     map[string][]partition.ID{"a": {1}, "b": {0}},
		},
		{
			name: "three shards in a ring",
			rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 3), ownerRoleOf("b", "3", "12", 1, 4), ownerRoleOf("c", "3", "13", 2, 5),
				ownerBindingOf("a", "14"), ownerBindingOf("b", "15"), ownerBindingOf("c", "16")},
			batch:        map[partition.ID]string{0: "b", 1: "c", 2: "a"},
			wantRoles:    map[string][]int{"a": {2, 3}, "b": {0, 4}, "c": {1, 5}},
			wantBindings: []string{"a", "b", "c"},
			wantWrites:   6,
			wantGained:   map[string][]partition.ID{"a": {2}, "b": {0}, "c": {1}},
		},
		{
			name:         "a new owner gets a Role and a RoleBinding",
			batch:        map[partition.ID]string{3: "c", 4: "c"},
			wantRoles:    map[string][]int{"c": {3, 4}},
			wantBindings: []string{"c"},
			wantWrites:   2,
			wantGained:   map[string][]partition.ID{"c": {3, 4}},
		},
		{
			name:         "a partition to no owner",
			rbac:         []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")},
			batch:        map[partition.ID]string{0: ""},
			wantRoles:    map[string][]int{"a": {1}},
			wantBindings: []string{"a"},
			wantWrites:   1,
			wantGained:   map[string][]partition.ID{},
		},
		{
			name:       "the last partition to no owner",
			rbac:       []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerBindingOf("a", "12")},
			batch:      map[partition.ID]string{0: ""},
			wantRoles:  map[string][]int{},
			wantWrites: 2, // the Role, then its binding
			wantGained: map[string][]partition.ID{},
		},
		{
			name:         "the record already says it",
			rbac:         []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerBindingOf("a", "12")},
			batch:        map[partition.ID]string{0: "a"},
			wantRoles:    map[string][]int{"a": {0}},
			wantBindings: []string{"a"},
			wantWrites:   0,
			wantGained:   map[string][]partition.ID{"a": {0}},
		},
		{
			name:           "over a forged term",
			rbac:           []runtime.Object{ownerRoleOf("a", forgedTerm, "11", 0, 1), ownerBindingOf("a", "12")},
			batch:          map[partition.ID]string{1: "b"},
			wantRoles:      map[string][]int{"a": {0}, "b": {1}},
			wantBindings:   []string{"a", "b"},
			wantRoleWrites: map[string][][]int{"a": {{0}}, "b": {{1}}},
			wantWrites:     3,
			wantGained:     map[string][]partition.ID{"b": {1}},
		},
		{
			name: "over a plausible higher term written after Activate",
			rbac: []runtime.Object{ownerRoleOf("a", "5", "11", 0, 1), ownerBindingOf("a", "12")},
			afterActivate: func(f *fixture) {
				r := f.role(OwnerRolePrefix + "a").DeepCopy()
				r.Annotations[TermAnnotation] = "9"
				r.ResourceVersion = "21"
				if err := f.kube.Tracker().Update(rolesGVR, r, testNamespace); err != nil {
					f.t.Fatal(err)
				}
			},
			batch:          map[partition.ID]string{1: "b"},
			wantRoles:      map[string][]int{"a": {0}, "b": {1}},
			wantBindings:   []string{"a", "b"},
			wantRoleWrites: map[string][][]int{"a": {{0}}, "b": {{1}}},
			wantRV:         map[string]string{"roles/" + OwnerRolePrefix + "a": "21"}, // as listed by Set, not by Activate
			wantWrites:     3,
			wantGained:     map[string][]partition.ID{"b": {1}},
		},
		{
			name: "a Role with an extra rule is rewritten to the owner rule alone",
			rbac: []runtime.Object{
				recordRole(OwnerRolePrefix+"a", "3", "11", ownerRule("0"), rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}),
				ownerBindingOf("a", "12")},
			batch:          map[partition.ID]string{1: "b"},
			wantRoles:      map[string][]int{"a": {0}, "b": {1}},
			wantBindings:   []string{"a", "b"},
			wantRoleWrites: map[string][][]int{"a": {{0}}, "b": {{1}}},
			wantWrites:     3,
			wantGained:     map[string][]partition.ID{"b": {1}},
		},
		{
			name: "a Role naming partitions outside the map is rewritten",
			rbac: []runtime.Object{
				recordRole(OwnerRolePrefix+"a", "3", "11", ownerRule("0", "8", "x")), ownerBindingOf("a", "12")},
			batch:          map[partition.ID]string{1: "b"},
			wantRoles:      map[string][]int{"a": {0}, "b": {1}},
			wantBindings:   []string{"a", "b"},
			wantRoleWrites: map[string][][]int{"a": {{0}}, "b": {{1}}},
			wantWrites:     3,
			wantGained:     map[string][]partition.ID{"b": {1}},
		},
		{
			name: "a Role granting every partition (no resourceNames) is deleted before any grant",
			rbac: []runtime.Object{
				recordRole(OwnerRolePrefix+"z", "3", "11", ownerRule()), ownerBindingOf("z", "12")},
			batch:          map[partition.ID]string{0: "a"},
			wantRoles:      map[string][]int{"a": {0}},
			wantBindings:   []string{"a"},
			wantRoleWrites: map[string][][]int{"z": {nil}, "a": {{0}}},
			wantWrites:     4,
			wantGained:     map[string][]partition.ID{"a": {0}},
		},
		{
			name: "a RoleBinding with another subject is put back",
			rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0), func() *rbacv1.RoleBinding {
				b := ownerBindingOf("a", "12")
				b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "kshard-shard", Namespace: testNamespace})
				return b
			}()},
			batch:        map[partition.ID]string{1: "a"},
			wantRoles:    map[string][]int{"a": {0, 1}},
			wantBindings: []string{"a"},
			wantRV:       map[string]string{"rolebindings/" + OwnerRolePrefix + "a": "12"},
			wantWrites:   2,
			wantGained:   map[string][]partition.ID{"a": {1}},
		},
		{
			name: "a RoleBinding to another Role is recreated",
			rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0), func() *rbacv1.RoleBinding {
				b := ownerBindingOf("a", "12")
				b.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}
				return b
			}()},
			batch:        map[partition.ID]string{1: "a"},
			wantRoles:    map[string][]int{"a": {0, 1}},
			wantBindings: []string{"a"},
			wantRV:       map[string]string{"rolebindings/" + OwnerRolePrefix + "a": "12"},
			wantWrites:   3, // the Role, the binding deleted and created
			wantGained:   map[string][]partition.ID{"a": {1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSetCase(t, term, tt)
		})
	}
}

func runSetCase(t *testing.T, term uint32, tt setCase) {
	f := newFixture(t, setup{rbac: tt.rbac})
	f.activate(term, certain)
	if tt.afterActivate != nil {
		tt.afterActivate(f)
	}
	before := f.roleGrants()
	f.resetActions()
	res, err := f.l.Set(f.ctx, tt.batch)
	if err != nil {
		t.Fatalf("Set(%v): %v", tt.batch, err)
	}
	writes := f.rbacWrites()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the writes of Set: %v", writes)
		}
	})
	checkRoleWrites(t, f, term, writes)
	checkRemovalsFirst(t, f, before, writes)
	if v := f.api.Violations(); len(v) > 0 {
		t.Errorf("requests without preconditions: %v", v)
	}
	if got := f.roles(); !maps.EqualFunc(got, tt.wantRoles, slices.Equal) {
		t.Errorf("owner Roles %v after Set, want %v", got, tt.wantRoles)
	}
	checkBindings(t, f, tt.wantBindings)
	if tt.wantRoleWrites != nil {
		got := map[string][][]int{}
		for _, w := range writes {
			if shard, ok := strings.CutPrefix(w.name, OwnerRolePrefix); ok && w.resource == "roles" {
				if _, want := tt.wantRoleWrites[shard]; !want {
					continue
				}
				var ps []int
				if w.role != nil {
					ps = testPartitionsOf(w.role)
				}
				got[shard] = append(got[shard], ps)
			}
		}
		if !maps.EqualFunc(got, tt.wantRoleWrites, func(a, b [][]int) bool { return slices.EqualFunc(a, b, slices.Equal) }) {
			t.Errorf("Role writes %v, want %v", got, tt.wantRoleWrites)
		}
	}
	for key, want := range tt.wantRV {
		resource, name, _ := strings.Cut(key, "/")
		found := false
		for _, w := range writes {
			if w.resource == resource && w.name == name {
				found = true
				if w.rv != want {
					t.Errorf("the first write of %s carried resourceVersion %q, want %q (the listed one)", key, w.rv, want)
				}
				break
			}
		}
		if !found {
			t.Errorf("%s was not written", key)
		}
	}
	if res.Writes != tt.wantWrites || res.Writes != len(writes) {
		t.Errorf("Set wrote %d times (SetResult.Writes %d), want %d", len(writes), res.Writes, tt.wantWrites)
	}
	if !maps.EqualFunc(res.Gained, tt.wantGained, slices.Equal) {
		t.Errorf("SetResult.Gained = %v, want %v", res.Gained, tt.wantGained)
	}
	// A second Set of the same batch finds nothing to write.
	f.resetActions()
	if res, err := f.l.Set(f.ctx, tt.batch); err != nil || res.Writes != 0 {
		t.Errorf("Set again = %+v, %v; want no write (sent %v)", res, err, f.rbacWrites())
	}
}

// checkRoleWrites checks every Role the Labeler created or updated: one rule, the owner
// rule with resourceNames (a rule without would grant every partition), the term
// annotation of the writer, and the record label.
func checkRoleWrites(t *testing.T, f *fixture, term uint32, writes []rbacWrite) {
	t.Helper()
	for _, w := range writes {
		if w.role == nil {
			continue
		}
		r := w.role
		if len(r.Rules) != 1 {
			t.Errorf("%s: %d rules, want 1", w, len(r.Rules))
		}
		for _, rule := range r.Rules {
			if len(rule.ResourceNames) == 0 {
				t.Errorf("%s: a rule without resourceNames (grants every partition): %+v", w, rule)
			}
			if !slices.Equal(rule.APIGroups, []string{PartitionsGroup}) || !slices.Equal(rule.Resources, []string{PartitionsResource}) ||
				!slices.Equal(rule.Verbs, []string{OwnVerb}) || len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s: rule %+v is not the owner rule", w, rule)
			}
			for _, n := range rule.ResourceNames {
				if v, err := strconv.Atoi(n); err != nil || !f.pm.Contains(partition.ID(v)) || strconv.Itoa(v) != n {
					t.Errorf("%s: resourceName %q is not a partition of the map", w, n)
				}
			}
		}
		if got := r.Annotations[TermAnnotation]; got != strconv.FormatUint(uint64(term), 10) {
			t.Errorf("%s: term annotation %q, want %d", w, got, term)
		}
		if r.Labels[RecordLabel] == "" {
			t.Errorf("%s: without the %s label", w, RecordLabel)
		}
		if r.Namespace != testNamespace {
			t.Errorf("%s: in namespace %q, want %q", w, r.Namespace, testNamespace)
		}
	}
}

// roleGrants returns what each stored owner Role grants as RBAC reads it: the partitions
// of the map any of its rules lets the verb own on partitions (a rule without
// resourceNames grants every one).
func (f *fixture) roleGrants() map[string][]int {
	f.t.Helper()
	out := map[string][]int{}
	list, err := f.kube.Tracker().List(rolesGVR, rbacv1.SchemeGroupVersion.WithKind("Role"), testNamespace)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range list.(*rbacv1.RoleList).Items {
		r := &list.(*rbacv1.RoleList).Items[i]
		if strings.HasPrefix(r.Name, OwnerRolePrefix) {
			out[r.Name] = rbacGrants(r, f.pm)
		}
	}
	return out
}

// rbacGrants returns the partitions of pm r grants the verb own on, as RBAC reads it.
func rbacGrants(r *rbacv1.Role, pm partition.Map) []int {
	var out []int
	for p := range pm.Count {
		if rbacAllows(r.Rules, PartitionsGroup, PartitionsResource, OwnVerb, strconv.Itoa(p)) {
			out = append(out, p)
		}
	}
	return out
}

// rbacAllows reports whether rules allow verb on the named resource, as RBAC's rule
// resolution does.
func rbacAllows(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range rules {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// checkRemovalsFirst replays writes over before (Role name → partitions granted) and
// checks that every write taking partitions away (a delete, or an update granting a
// subset of what the Role granted) comes before every write giving one, and that no
// write grants a partition another Role still grants.
func checkRemovalsFirst(t *testing.T, f *fixture, before map[string][]int, writes []rbacWrite) {
	t.Helper()
	state := maps.Clone(before)
	firstGrant := -1
	for i, w := range writes {
		if w.resource != "roles" || !strings.HasPrefix(w.name, OwnerRolePrefix) {
			continue
		}
		prev := state[w.name]
		var next []int
		if w.role != nil {
			next = rbacGrants(w.role, f.pm)
		}
		var gained []int
		for _, p := range next {
			if !slices.Contains(prev, p) {
				gained = append(gained, p)
			}
		}
		removes := len(next) < len(prev) || w.verb == "delete"
		if removes && firstGrant >= 0 {
			t.Errorf("write %d (%s) takes partitions away after write %d (%s) granted some", i, w, firstGrant, writes[firstGrant])
		}
		if len(gained) > 0 && firstGrant < 0 {
			firstGrant = i
		}
		for _, p := range gained {
			for other, ps := range state {
				if other != w.name && slices.Contains(ps, p) {
					t.Errorf("write %d (%s) grants partition %d while %s still grants it", i, w, p, other)
				}
			}
		}
		if w.verb == "delete" {
			delete(state, w.name)
		} else {
			state[w.name] = next
		}
	}
}

// checkBindings checks that exactly the shards want have a RoleBinding, each binding the
// owner Role of its name to the owner subject of its name.
func checkBindings(t *testing.T, f *fixture, want []string) {
	t.Helper()
	got := f.bindings()
	var names []string
	for name := range got {
		names = append(names, strings.TrimPrefix(name, OwnerRolePrefix))
	}
	slices.Sort(names)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(names, want) {
		t.Errorf("RoleBindings of %v, want %v", names, want)
	}
	for name, b := range got {
		wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: testNamespace}}
		if b.RoleRef != wantRef || !slices.Equal(b.Subjects, wantSubjects) {
			t.Errorf("RoleBinding %s: roleRef %+v subjects %+v, want %+v and %+v", name, b.RoleRef, b.Subjects, wantRef, wantSubjects)
		}
		if b.Labels[RecordLabel] == "" {
			t.Errorf("RoleBinding %s without the %s label", name, RecordLabel)
		}
	}
}

// TestLabelerSetOrphanBinding: the RoleBinding of a shard that owns nothing is deleted
// even when its Role is already gone, as when the delete of the binding failed after the
// Role's: the batch's retry (or the Role repair) deletes it. Otherwise it stays for good, as
// shard IDs are pod names, never used again.
func TestLabelerSetOrphanBinding(t *testing.T) {
	f := newFixture(t, setup{rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerBindingOf("a", "12"), ownerRoleOf("b", "3", "13", 1), ownerBindingOf("b", "14")}})
	f.activate(7, certain)
	var failed atomic.Bool
	f.api.setBefore(func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "rolebindings" && failed.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewInternalError(errors.New("etcd timeout"))
		}
		return false, nil, nil
	})
	batch := map[partition.ID]string{0: ""}
	if _, err := f.l.Set(f.ctx, batch); !apierrors.IsInternalError(err) {
		t.Fatalf("Set with the binding's delete failing = %v, want the InternalError", err)
	}
	if f.role(OwnerRolePrefix+"a") != nil {
		t.Fatal("the Role of a shard left with nothing was not deleted")
	}
	// The retry of the batch, and a repair.
	if _, err := f.l.Set(f.ctx, batch); err != nil {
		t.Fatalf("Set again: %v", err)
	}
	f.repairRoles()
	if _, ok := f.bindings()[OwnerRolePrefix+"a"]; ok {
		t.Fatal("the RoleBinding kshard-owner.a of a shard that owns nothing stays once its Role is gone: " +
			"a binding delete that failed after the Role's delete must be retried (by Set or the Role repair)")
	}
	checkBindings(t, f, []string{"b"})
}

// TestLabelerSetRefused: a batch naming a shard ID that cannot name an owner Role, or a
// partition outside the map, is refused whole: nothing written, the table unchanged. So
// is every batch before Activate.
func TestLabelerSetRefused(t *testing.T) {
	tests := []struct {
		name     string
		batch    map[partition.ID]string
		inactive bool
		wantErr  string
	}{
		{name: "upper case", batch: map[partition.ID]string{1: "b", 2: "Shard-B"}, wantErr: "cannot name an owner Role"},
		{name: "underscore", batch: map[partition.ID]string{2: "shard_b"}, wantErr: "cannot name an owner Role"},
		{name: "slash", batch: map[partition.ID]string{2: "a/b"}, wantErr: "cannot name an owner Role"},
		{name: "too long", batch: map[partition.ID]string{2: strings.Repeat("a", 254-len(OwnerRolePrefix))}, wantErr: "cannot name an owner Role"},
		{name: "a partition outside the map", batch: map[partition.ID]string{1: "b", 8: "b"}, wantErr: "not one of the 8 partitions"},
		{name: "a partition far outside the map", batch: map[partition.ID]string{1<<32 - 1: ""}, wantErr: "not one of the 8 partitions"},
		{name: "before Activate", batch: map[partition.ID]string{1: "b"}, inactive: true, wantErr: "not active"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")}})
			if !tt.inactive {
				f.activate(7, certain)
			}
			_, _, _, table := f.l.snapshot()
			f.resetActions()
			_, err := f.l.Set(f.ctx, tt.batch)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Set(%v) = %v, want an error with %q", tt.batch, err, tt.wantErr)
			}
			if w := f.rbacWrites(); len(w) > 0 {
				t.Errorf("a refused batch wrote %v", w)
			}
			if _, _, _, after := f.l.snapshot(); !maps.Equal(after, table) {
				t.Errorf("a refused batch changed the table from %v to %v", table, after)
			}
		})
	}
}

func TestValidateShardID(t *testing.T) {
	tests := []struct {
		shard   string
		wantErr bool
	}{
		{shard: "kshard-shard-0"},
		{shard: "kshard-shard-7c9f8d-x2v4q"},
		{shard: "pod.with.dots"},
		{shard: strings.Repeat("a", 253-len(OwnerRolePrefix))},
		{shard: strings.Repeat("a", 254-len(OwnerRolePrefix)), wantErr: true},
		{shard: "", wantErr: true},
		{shard: "Shard", wantErr: true},
		{shard: "a_b", wantErr: true},
		{shard: "a/b", wantErr: true},
		{shard: "-a", wantErr: true}, // "kshard-owner.-a": a label starting with a dash
		{shard: "a-", wantErr: true},
		{shard: "a..b", wantErr: true},
	}
	for _, tt := range tests {
		name := tt.shard
		if len(name) > 20 {
			name = name[:10] + "…" + strconv.Itoa(len(name))
		}
		t.Run(name, func(t *testing.T) {
			if err := ValidateShardID(tt.shard); (err != nil) != tt.wantErr {
				t.Errorf("ValidateShardID(%q) = %v, wantErr %t", tt.shard, err, tt.wantErr)
			}
		})
	}
}

// TestLabelerSetOnlyWhileCertain: while the tenure is not valid Set writes nothing at
// all, removal or grant, and says why (ErrNotCertain); once it is valid again, Set
// writes.
func TestLabelerSetOnlyWhileCertain(t *testing.T) {
	tests := []struct {
		name  string
		rbac  []runtime.Object
		batch map[partition.ID]string
		want  map[string][]int
	}{
		{name: "a removal and a grant", rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")},
			batch: map[partition.ID]string{1: "b"}, want: map[string][]int{"a": {0}, "b": {1}}},
		{name: "a grant only", batch: map[partition.ID]string{0: "a"}, want: map[string][]int{"a": {0}}},
		{name: "a removal only", rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")},
			batch: map[partition.ID]string{1: ""}, want: map[string][]int{"a": {0}}},
		{name: "a deletion only", rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0), ownerBindingOf("a", "12")},
			batch: map[partition.ID]string{0: ""}, want: map[string][]int{}},
		{name: "a RoleBinding only", rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0)},
			batch: map[partition.ID]string{0: "a"}, want: map[string][]int{"a": {0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{rbac: tt.rbac})
			var ten tenure
			f.activate(7, &ten)
			f.resetActions()
			if _, err := f.l.Set(f.ctx, tt.batch); !errors.Is(err, ErrNotCertain) {
				t.Fatalf("Set without a valid tenure: %v, want ErrNotCertain", err)
			}
			f.repairRoles()
			if w := f.rbacWrites(); len(w) > 0 {
				t.Fatalf("wrote %v without a valid tenure", w)
			}
			ten.valid.Store(true)
			if _, err := f.l.Set(f.ctx, tt.batch); err != nil {
				t.Fatalf("Set once the tenure is valid: %v", err)
			}
			if got := f.roles(); !maps.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("owner Roles %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLabelerSetStopsGrants: when a removal is not written (the tenure ends after it
// was sent, the Role changed since it was listed, the API server refuses it), Set fails
// and writes no grant: a grant must never precede a removal of the batch.
func TestLabelerSetStopsGrants(t *testing.T) {
	tests := []struct {
		name   string
		before func(f *fixture, ten *tenure) func(clienttesting.Action) (bool, runtime.Object, error)
		check  func(t *testing.T, err error)
	}{
		{
			name: "the tenure ends once the first removal is sent",
			before: func(_ *fixture, ten *tenure) func(clienttesting.Action) (bool, runtime.Object, error) {
				return func(clienttesting.Action) (bool, runtime.Object, error) {
					ten.valid.Store(false)
					return false, nil, nil
				}
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrNotCertain) {
					t.Errorf("Set = %v, want ErrNotCertain", err)
				}
			},
		},
		{
			name: "a Role changed since it was listed",
			before: func(f *fixture, _ *tenure) func(clienttesting.Action) (bool, runtime.Object, error) {
				return func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.GetVerb() == "update" && a.GetResource().Resource == "roles" {
						r := f.role(OwnerRolePrefix + "a").DeepCopy()
						r.ResourceVersion = "50"
						if err := f.kube.Tracker().Update(rolesGVR, r, testNamespace); err != nil {
							return true, nil, err
						}
					}
					return false, nil, nil
				}
			},
			check: func(t *testing.T, err error) {
				if !apierrors.IsConflict(err) {
					t.Errorf("Set = %v, want a Conflict", err)
				}
			},
		},
		{
			name: "the API server refuses a removal",
			before: func(*fixture, *tenure) func(clienttesting.Action) (bool, runtime.Object, error) {
				return func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.GetResource().Resource == "roles" && a.GetVerb() == "delete" {
						return true, nil, apierrors.NewForbidden(rolesGVR.GroupResource(), "x", errors.New("no"))
					}
					return false, nil, nil
				}
			},
			check: func(t *testing.T, err error) {
				if !apierrors.IsForbidden(err) {
					t.Errorf("Set = %v, want Forbidden", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// a loses 1 and its last partition 2's Role c is deleted; b gains both.
			f := newFixture(t, setup{rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerRoleOf("c", "3", "12", 2),
				ownerBindingOf("a", "13"), ownerBindingOf("c", "14")}})
			ten := validTenure()
			f.activate(7, ten)
			f.resetActions()
			f.api.setBefore(tt.before(f, ten))
			_, err := f.l.Set(f.ctx, map[partition.ID]string{1: "b", 2: "b"})
			if err == nil {
				t.Fatal("Set succeeded")
			}
			tt.check(t, err)
			for _, w := range f.rbacWrites() {
				if w.verb == "create" || (w.role != nil && slices.ContainsFunc(testPartitionsOf(w.role), func(p int) bool { return p != 0 })) {
					t.Errorf("a grant was sent although a removal failed: %s", w)
				}
			}
			if got := f.roles(); slices.Contains(got["b"], 1) || slices.Contains(got["b"], 2) {
				t.Errorf("b was granted %v although a removal failed", got["b"])
			}
		})
	}
}

// TestLabelerStampTerm: StampTerm creates the term beacon, raises a lower term on it,
// leaves the same or a higher one, writes only while the tenure is valid, and only once
// active.
func TestLabelerStampTerm(t *testing.T) {
	const term = 7
	tests := []struct {
		name          string
		rbac          []runtime.Object
		afterActivate func(*fixture)
		invalid       bool
		inactive      bool
		wantErr       error
		wantVerb      string // the write sent ("" for none)
		wantRV        string // the resourceVersion an update carried
		wantTerm      string // the beacon's term afterwards ("" for no beacon)
	}{
		{name: "creates the beacon", wantVerb: "create", wantTerm: "7"},
		{name: "raises a lower term", rbac: []runtime.Object{recordRole(TermRoleName, "3", "11")},
			wantVerb: "update", wantRV: "11", wantTerm: "7"},
		{name: "raises a term that is not a number", rbac: []runtime.Object{recordRole(TermRoleName, "x", "11")},
			wantVerb: "update", wantRV: "11", wantTerm: "7"},
		{name: "leaves the same term", rbac: []runtime.Object{recordRole(TermRoleName, "7", "11")}, wantTerm: "7"},
		{name: "leaves a higher term", rbac: []runtime.Object{recordRole(TermRoleName, "5", "11")},
			afterActivate: func(f *fixture) {
				r := f.role(TermRoleName).DeepCopy()
				r.Annotations[TermAnnotation], r.ResourceVersion = "9", "21"
				if err := f.kube.Tracker().Update(rolesGVR, r, testNamespace); err != nil {
					f.t.Fatal(err)
				}
			}, wantTerm: "9"},
		{name: "no beacon created without a valid tenure", invalid: true, wantErr: ErrNotCertain},
		{name: "no term raised without a valid tenure", rbac: []runtime.Object{recordRole(TermRoleName, "3", "11")},
			invalid: true, wantErr: ErrNotCertain, wantTerm: "3"},
		{name: "nothing before Activate", inactive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{rbac: tt.rbac})
			ten := validTenure()
			ten.valid.Store(!tt.invalid)
			if !tt.inactive {
				f.activate(term, ten)
			}
			if tt.afterActivate != nil {
				tt.afterActivate(f)
			}
			f.resetActions()
			err := f.l.StampTerm(f.ctx)
			switch {
			case tt.inactive:
				if err == nil {
					t.Error("StampTerm succeeded before Activate")
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("StampTerm = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("StampTerm: %v", err)
			}
			writes := f.rbacWrites()
			switch {
			case tt.wantVerb == "" && len(writes) > 0:
				t.Errorf("StampTerm wrote %v, want nothing", writes)
			case tt.wantVerb != "" && (len(writes) != 1 || writes[0].verb != tt.wantVerb || writes[0].name != TermRoleName):
				t.Errorf("StampTerm wrote %v, want one %s of %s", writes, tt.wantVerb, TermRoleName)
			case tt.wantVerb == "update" && writes[0].rv != tt.wantRV:
				t.Errorf("the update carried resourceVersion %q, want %q", writes[0].rv, tt.wantRV)
			}
			if v := f.api.Violations(); len(v) > 0 {
				t.Errorf("requests without preconditions: %v", v)
			}
			r := f.role(TermRoleName)
			switch {
			case tt.wantTerm == "" && r != nil:
				t.Errorf("a beacon %+v exists, want none", r)
			case tt.wantTerm == "":
			case r == nil:
				t.Errorf("no beacon, want one of term %s", tt.wantTerm)
			default:
				if got := r.Annotations[TermAnnotation]; got != tt.wantTerm {
					t.Errorf("the beacon's term is %q, want %q", got, tt.wantTerm)
				}
				if r.Labels[RecordLabel] == "" || len(r.Rules) != 0 {
					t.Errorf("the beacon has labels %v and rules %v, want the %s label and no rule", r.Labels, r.Rules, RecordLabel)
				}
			}
		})
	}
}

// TestLabelerStampTermOverForged: a forged term on the beacon (one no coordinator can
// have led: Activate counts it in Forged and ignores it) is written over by the leader's
// term. Left there, the beacon never records a term again: a later leader, the term
// Lease gone, would not see this leadership's term on it and could lead it again while
// shards still hold its epochs, the very thing the beacon is for.
func TestLabelerStampTermOverForged(t *testing.T) {
	f := newFixture(t, setup{rbac: []runtime.Object{recordRole(TermRoleName, forgedTerm, "11")}})
	if c := f.activate(7, certain); c.Forged != 1 || c.HighestTerm != 0 {
		t.Fatalf("Activate = %+v, want the beacon's term counted as forged", c)
	}
	if err := f.l.StampTerm(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.role(TermRoleName).Annotations[TermAnnotation]; got != "7" {
		t.Fatalf("StampTerm left a forged term (%s) on the term beacon, so it does not record this leadership's term 7; "+
			"a later leader that lost the term Lease ignores the forged term (Claimed.Forged) and can lead term 7 again", got)
	}
	// A later leader sees the term.
	f.l.Deactivate()
	if c := f.activate(8, certain); c.HighestTerm != 7 || c.HighestIn != TermRoleName {
		t.Errorf("the next leader's Activate = %+v, want HighestTerm 7 on %s", c, TermRoleName)
	}
}

// TestLabelerRepairsRoles: the running, active Labeler puts back an owner Role an
// administrator deleted or widened, and a deleted RoleBinding; not while its tenure is
// invalid.
func TestLabelerRepairsRoles(t *testing.T) {
	f := newFixture(t, setup{run: true, opts: LabelerOptions{RoleResync: 10 * time.Millisecond}})
	ten := validTenure()
	f.activate(7, ten)
	if _, err := f.l.Set(f.ctx, map[partition.ID]string{0: "a", 1: "b"}); err != nil {
		t.Fatal(err)
	}
	ten.valid.Store(false)
	if err := f.kube.Tracker().Delete(rolesGVR, testNamespace, OwnerRolePrefix+"a"); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.Tracker().Delete(roleBindingsGVR, testNamespace, OwnerRolePrefix+"b"); err != nil {
		t.Fatal(err)
	}
	b := f.role(OwnerRolePrefix + "b").DeepCopy()
	b.Rules = append(b.Rules, ownerRule("2", "3"))
	b.ResourceVersion = "60"
	if err := f.kube.Tracker().Update(rolesGVR, b, testNamespace); err != nil {
		t.Fatal(err)
	}
	f.resetActions()
	time.Sleep(100 * time.Millisecond) // ten RoleResyncs
	if w := f.rbacWrites(); len(w) > 0 {
		t.Fatalf("the repair wrote %v without a valid tenure", w)
	}
	ten.valid.Store(true)
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		a, b := f.role(OwnerRolePrefix+"a"), f.role(OwnerRolePrefix+"b")
		_, bound := f.bindings()[OwnerRolePrefix+"b"]
		return a != nil && b != nil && len(b.Rules) == 1 && bound, nil
	}); err != nil {
		t.Fatalf("the Labeler did not repair the Roles: %v (writes %v)", f.roles(), f.rbacWrites())
	}
	if got := f.roles(); !maps.EqualFunc(got, map[string][]int{"a": {0}, "b": {1}}, slices.Equal) {
		t.Errorf("owner Roles %v after the repair, want a [0] b [1]", got)
	}
	checkBindings(t, f, []string{"a", "b"})
	checkRoleWrites(t, f, 7, f.rbacWrites())
}

// TestLabelerDeactivate: once deactivated (leadership ended) Set writes nothing.
func TestLabelerDeactivate(t *testing.T) {
	f := newFixture(t, setup{})
	f.activate(7, certain)
	f.l.Deactivate()
	if _, err := f.l.Set(f.ctx, map[partition.ID]string{0: "a"}); err == nil {
		t.Error("Set succeeded after Deactivate")
	}
	if w := f.rbacWrites(); len(w) > 0 {
		t.Errorf("wrote %v after Deactivate", w)
	}
}
