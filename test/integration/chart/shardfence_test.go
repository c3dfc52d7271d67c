package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

// TestShardFenceTemplateIsCurrent checks that the chart's fence template is what
// ShardFenceTemplate generates from pkg/sharding/ownerrecord (-update rewrites it, keeping
// its comments), so that a change of the policies' CEL in the code is one command away
// from the chart; TestShardFencePolicyMatchesCode checks the rendering.
func TestShardFenceTemplateIsCurrent(t *testing.T) {
	path := filepath.Join(ChartDir(), ShardFenceTemplatePath)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ShardFenceTemplate(string(got))
	if err != nil {
		t.Fatal(err)
	}
	if *update && string(got) != want {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		got = []byte(want)
	}
	if string(got) != want {
		t.Fatalf("%s is not what pkg/sharding/ownerrecord builds; regenerate it with\n"+
			"  go test ./test/integration/chart -run TestShardFenceTemplateIsCurrent -update\nwant:\n%s", path, want)
	}
}

// TestShardFencePolicyMatchesCode renders the chart's server-side fence and compares it
// with what pkg/sharding/ownerrecord builds for the same names, so the chart and the code
// (the local control plane's and the integration tests' policy) cannot drift: the three
// policies and bindings, the probe user's RBAC, and the coordinator's record Role and
// RoleBinding in the release namespace. CEL is compared with runs of whitespace
// collapsed: the chart folds long expressions over lines.
func TestShardFencePolicyMatchesCode(t *testing.T) {
	type fenceCase struct {
		name      string
		release   string
		namespace string
		set       []string
		enabled   bool
		params    ownerrecord.PolicyParams
	}
	tests := []fenceCase{
		{name: "defaults", release: "kshard", namespace: "kshard-system", enabled: true,
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "kshard-shard",
				CoordinatorUser: "system:serviceaccount:kshard-system:kshard-coordinator"}},
		{name: "other release and namespace", release: "blue", namespace: "tenants", enabled: true,
			set: []string{"shardFence.partitionLabel=blue.kshard.io/partition"},
			params: ownerrecord.PolicyParams{Name: "blue-kshard-shard-fence-tenants", Namespace: "tenants", ServiceAccount: "blue-kshard-shard",
				PartitionLabel: "blue.kshard.io/partition", CoordinatorUser: "system:serviceaccount:tenants:blue-kshard-coordinator"}},
		{name: "named ServiceAccounts", release: "kshard", namespace: "kshard-system", enabled: true,
			set: []string{"serviceAccount.shard.create=false", "serviceAccount.shard.name=my-shards",
				"serviceAccount.coordinator.create=false", "serviceAccount.coordinator.name=my-coordinators"},
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "my-shards",
				CoordinatorUser: "system:serviceaccount:kshard-system:my-coordinators"}},
		{name: "disabled", release: "kshard", namespace: "kshard-system", set: []string{"shardFence.enabled=false"}},
	}
	// The chart computes the cluster partition from .Values.partitions in 64-bit pieces
	// (kshard.clusterPartition): the counts at both ends of the range and in between.
	for _, count := range []int{1, 7, 1000, partition.MaxCount} {
		tests = append(tests, fenceCase{name: fmt.Sprintf("%d partitions", count), release: "kshard", namespace: "kshard-system", enabled: true,
			set: []string{fmt.Sprintf("partitions=%d", count)},
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "kshard-shard",
				ClusterPartition: ownerrecord.ClusterPartitionOf(partition.Map{Count: count}),
				CoordinatorUser:  "system:serviceaccount:kshard-system:kshard-coordinator"}})
	}
	for i := range tests {
		if tests[i].enabled && tests[i].params.ClusterPartition == "" {
			tests[i].params.ClusterPartition = ownerrecord.ClusterPartitionOf(partition.Map{Count: partition.DefaultCount}) // values.yaml's partitions
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := Render(t, tc.release, tc.namespace, []string{filepath.Join(ChartDir(), "ci", "default-values.yaml")}, tc.set...)
			policies, bindings := objs.Kind("ValidatingAdmissionPolicy"), objs.Kind("ValidatingAdmissionPolicyBinding")
			coordinator := tc.release + "-coordinator"
			if !strings.Contains(tc.release, "kshard") {
				coordinator = tc.release + "-kshard-coordinator"
			}
			if !tc.enabled {
				if len(policies)+len(bindings) != 0 {
					t.Fatalf("shardFence.enabled=false still renders %d policies and %d bindings", len(policies), len(bindings))
				}
				for _, u := range objs.Kind("ClusterRole") {
					if !strings.HasPrefix(u.GetName(), coordinator) {
						continue
					}
					// Only the Namespace reader of placement by load (list and watch).
					var cr rbacv1.ClusterRole
					Into(t, u, &cr)
					if len(cr.Rules) != 1 || !hasRule(cr.Rules, "", "namespaces", "list") || !hasRule(cr.Rules, "", "namespaces", "watch") ||
						len(cr.Rules[0].Verbs) != 2 || len(cr.Rules[0].Resources) != 1 {
						t.Errorf("shardFence.enabled=false renders the coordinator ClusterRole %s with rules %+v, want list and watch of namespaces only", u.GetName(), cr.Rules)
					}
				}
				for _, kind := range []string{"Role", "RoleBinding"} {
					for _, u := range objs.Kind(kind) {
						if strings.HasSuffix(u.GetName(), ownerrecord.RecordRoleSuffix) {
							t.Errorf("shardFence.enabled=false still renders the coordinator's record %s %s", kind, u.GetName())
						}
					}
				}
				var role rbacv1.Role
				Into(t, objs.Get(t, "Role", coordinator), &role)
				if hasRule(role.Rules, "", "serviceaccounts", "impersonate") || hasNamedRule(role.Rules, "", "serviceaccounts", "impersonate", "kshard-shard") {
					t.Errorf("shardFence.enabled=false still lets the coordinator impersonate the shards")
				}
				return
			}
			wantPolicies, wantBindings := ownerrecord.Policies(tc.params), ownerrecord.Bindings(tc.params)
			if len(policies) != len(wantPolicies) || len(bindings) != len(wantBindings) {
				t.Fatalf("%d policies and %d bindings rendered, want %d and %d", len(policies), len(bindings), len(wantPolicies), len(wantBindings))
			}
			for i, wantPolicy := range wantPolicies {
				var policy admissionregistrationv1.ValidatingAdmissionPolicy
				var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
				Into(t, objs.Get(t, "ValidatingAdmissionPolicy", wantPolicy.Name), &policy)
				Into(t, objs.Get(t, "ValidatingAdmissionPolicyBinding", wantBindings[i].Name), &binding)
				gotSpec, wantSpec := normalizeCEL(policy.Spec), normalizeCEL(wantPolicy.Spec)
				if !apiequality.Semantic.DeepEqual(gotSpec, wantSpec) {
					t.Errorf("the chart's policy %s differs from ownerrecord's (%+v):\nchart:\n%s\ncode:\n%s", policy.Name, tc.params, toYAML(t, gotSpec), toYAML(t, wantSpec))
				}
				if !apiequality.Semantic.DeepEqual(binding.Spec, wantBindings[i].Spec) {
					t.Errorf("the chart's binding %s differs from ownerrecord's (%+v):\nchart:\n%s\ncode:\n%s", binding.Name, tc.params, toYAML(t, binding.Spec), toYAML(t, wantBindings[i].Spec))
				}
				// What the coordinator's Checker compares: the chart's objects are "ok".
				if d := ownerrecord.PolicySpecDiff(policy.Spec, wantPolicy.Spec); d != "" {
					t.Errorf("the Checker would find the chart's policy %s modified at %s", policy.Name, d)
				}
			}
			var probeRole rbacv1.ClusterRole
			var probeBinding rbacv1.ClusterRoleBinding
			wantRole, wantRB := ownerrecord.ProbeClusterRole(tc.params), ownerrecord.ProbeClusterRoleBinding(tc.params)
			Into(t, objs.Get(t, "ClusterRole", wantRole.Name), &probeRole)
			Into(t, objs.Get(t, "ClusterRoleBinding", wantRB.Name), &probeBinding)
			if !apiequality.Semantic.DeepEqual(probeRole.Rules, wantRole.Rules) {
				t.Errorf("the chart's probe ClusterRole rules %+v, want %+v", probeRole.Rules, wantRole.Rules)
			}
			if !apiequality.Semantic.DeepEqual(probeBinding.RoleRef, wantRB.RoleRef) || !apiequality.Semantic.DeepEqual(probeBinding.Subjects, wantRB.Subjects) {
				t.Errorf("the chart's probe ClusterRoleBinding %+v %+v, want %+v %+v", probeBinding.RoleRef, probeBinding.Subjects, wantRB.RoleRef, wantRB.Subjects)
			}

			// The coordinator's record Role and RoleBinding in the release namespace.
			var record rbacv1.Role
			var recordBinding rbacv1.RoleBinding
			wantRecord, wantRecordBinding := ownerrecord.RecordRole(tc.params), ownerrecord.RecordRoleBinding(tc.params)
			Into(t, objs.Get(t, "Role", wantRecord.Name), &record)
			Into(t, objs.Get(t, "RoleBinding", wantRecordBinding.Name), &recordBinding)
			if record.Namespace != wantRecord.Namespace || !apiequality.Semantic.DeepEqual(record.Rules, wantRecord.Rules) {
				t.Errorf("the chart's record Role %s/%s differs from ownerrecord.RecordRole's %s/%s:\nchart:\n%s\ncode:\n%s",
					record.Namespace, record.Name, wantRecord.Namespace, wantRecord.Name, toYAML(t, record.Rules), toYAML(t, wantRecord.Rules))
			}
			if recordBinding.Namespace != wantRecordBinding.Namespace || !apiequality.Semantic.DeepEqual(recordBinding.RoleRef, wantRecordBinding.RoleRef) ||
				!apiequality.Semantic.DeepEqual(recordBinding.Subjects, wantRecordBinding.Subjects) {
				t.Errorf("the chart's record RoleBinding %s/%s %+v %+v, want ownerrecord.RecordRoleBinding's %s/%s %+v %+v",
					recordBinding.Namespace, recordBinding.Name, recordBinding.RoleRef, recordBinding.Subjects,
					wantRecordBinding.Namespace, wantRecordBinding.Name, wantRecordBinding.RoleRef, wantRecordBinding.Subjects)
			}

			// The coordinator may keep the record, probe it as the probe user, and read the
			// fence's objects by name; it may not impersonate the shards.
			var cr rbacv1.ClusterRole
			Into(t, objs.Get(t, "ClusterRole", coordinator+"-"+tc.namespace), &cr)
			for _, v := range []string{"get", "list", "watch", "patch"} {
				if !hasRule(cr.Rules, "", "namespaces", v) {
					t.Errorf("coordinator ClusterRole %s lacks namespaces %s: %+v", cr.Name, v, cr.Rules)
				}
			}
			if !hasRule(cr.Rules, "authentication.k8s.io", "userextras/"+ownerrecord.PodNameExtra, "impersonate") {
				t.Errorf("coordinator ClusterRole %s lacks impersonation of the pod-name extra: %+v", cr.Name, cr.Rules)
			}
			if !hasNamedRule(cr.Rules, "", "users", "impersonate", tc.params.ProbeUser()) {
				t.Errorf("coordinator ClusterRole %s lacks impersonation of the probe user %s: %+v", cr.Name, tc.params.ProbeUser(), cr.Rules)
			}
			for _, p := range wantPolicies {
				for _, res := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
					for _, v := range []string{"get", "list", "watch"} {
						if !hasNamedRule(cr.Rules, "admissionregistration.k8s.io", res, v, p.Name) {
							t.Errorf("coordinator ClusterRole %s lacks %s of %s %s", cr.Name, v, res, p.Name)
						}
					}
				}
			}
			var role rbacv1.Role
			Into(t, objs.Get(t, "Role", coordinator), &role)
			for _, rules := range [][]rbacv1.PolicyRule{role.Rules, cr.Rules} {
				for _, r := range rules {
					if slices.Contains(r.Resources, "serviceaccounts") && slices.Contains(r.Verbs, "impersonate") {
						t.Errorf("the coordinator may impersonate ServiceAccounts %v: it must probe as the probe user only", r.ResourceNames)
					}
				}
			}
			if !hasRule(role.Rules, "", "events", "create") {
				t.Errorf("coordinator Role lacks creating Events (the fence check's): %+v", role.Rules)
			}
			if hasRule(role.Rules, "", "configmaps", "create") {
				t.Errorf("coordinator Role may create ConfigMaps: the record is in owner Roles and on the namespaces")
			}
			// The record's RBAC rights are the record Role's alone: in the release namespace
			// only, never cluster-wide, never escalate or bind, never a wildcard.
			for _, u := range objs {
				var rules []rbacv1.PolicyRule
				switch {
				case u.GetKind() == "ClusterRole" && strings.HasPrefix(u.GetName(), coordinator):
					var c rbacv1.ClusterRole
					Into(t, u, &c)
					rules = c.Rules
				case u.GetKind() == "Role" && u.GetName() == coordinator:
					rules = role.Rules
				case u.GetKind() == "Role" && u.GetName() == wantRecord.Name:
					for _, r := range record.Rules {
						for _, v := range r.Verbs {
							if v == "escalate" || v == "bind" || v == "impersonate" || v == "*" {
								t.Errorf("the record Role grants %s on %v", v, r.Resources)
							}
						}
						if slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
							t.Errorf("the record Role has a wildcard rule %+v", r)
						}
					}
					continue
				default:
					continue
				}
				for _, r := range rules {
					if slices.Contains(r.APIGroups, rbacv1.GroupName) || slices.Contains(r.APIGroups, ownerrecord.PartitionsGroup) ||
						slices.Contains(r.Resources, "localsubjectaccessreviews") || slices.Contains(r.Resources, "subjectaccessreviews") {
						t.Errorf("%s %s grants %v on %v: the record's rights belong in the record Role %s only", u.GetKind(), u.GetName(), r.Verbs, r.Resources, wantRecord.Name)
					}
				}
			}
		})
	}
}

// TestShardFenceCoordinatorRBAC is the RBAC proof of the fence's record keeping: with the
// chart's RBAC and its fence installed, the coordinator's ServiceAccount (a token of it,
// with nothing but the chart's Roles and ClusterRoles) can claim the owner record (the
// term beacon), write every Namespace's partition label, create, update and delete owner
// Roles and their RoleBindings (past the API server's RBAC escalation check, which needs
// the record Role's own rule: a ServiceAccount with the other rules only is refused),
// wait for them with LocalSubjectAccessReviews and dry-run probes as the probe user, and
// check the fence (its Checker finds every policy and binding as built); it cannot act as
// a shard, nor write RBAC outside the release namespace.
func TestShardFenceCoordinatorRBAC(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	// A partition label of this test's own, so that nothing else in the shared cluster
	// reads it (the record guard refuses everyone but this release's coordinator on it).
	label := "rbac-" + f.RunID + ".kshard.io/partition"
	r := installRBAC(t, f, "fence", ns, nil, "shardFence.partitionLabel="+label)
	coordSA, shardSA := r.coordinator.Spec.Template.Spec.ServiceAccountName, r.shard.Spec.Template.Spec.ServiceAccountName
	params := ownerrecord.PolicyParams{Namespace: ns, ServiceAccount: shardSA, PartitionLabel: label,
		CoordinatorUser: ownerrecord.ServiceAccountUser(ns, coordSA)}
	for _, u := range r.objs.Kind("ValidatingAdmissionPolicy") {
		if n := u.GetName(); !strings.HasSuffix(n, ownerrecord.RecordPolicySuffix) && !strings.HasSuffix(n, ownerrecord.LimitsPolicySuffix) {
			params.Name = n
		}
	}
	// The Labeler labels every Namespace of the cluster: the labels go once the fence's
	// bindings are gone (cleanups run last registered first).
	removeLabelWhenDone(t, f, label)
	applyFence(t, f, r)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, f, ns, coordSA))
	if err != nil {
		t.Fatal(err)
	}
	// As the coordinator does (cmd/coordinator/app/fence.go): the record's writes and
	// reviews do not queue behind the client's rate limiter.
	cfg.QPS = -1
	kube := kubernetes.NewForConfigOrDie(cfg)
	meta := metadata.NewForConfigOrDie(cfg)
	pm := partition.Map{Count: partition.DefaultCount}
	params.ClusterPartition = ownerrecord.ClusterPartitionOf(pm) // the chart's, for the default partitions
	target := f.Namespace(t, nil).Name
	p1 := pm.For(target)
	p2 := (p1 + 1) % partition.ID(pm.Count)
	framework.Eventually(t, 30*time.Second, "the coordinator's RBAC is in force", func(ctx context.Context) (bool, error) {
		if _, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return false, err
		}
		if _, err := kube.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{LabelSelector: ownerrecord.RecordLabel}); err != nil {
			return false, err
		}
		// What the escalation check asks of an owner Role's writer.
		r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: ownerrecord.PartitionsGroup,
				Resource: ownerrecord.PartitionsResource, Verb: ownerrecord.OwnVerb, Name: strconv.FormatUint(uint64(p1), 10)},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if !r.Status.Allowed {
			return false, fmt.Errorf("not yet allowed to %s %s.%s: %s", ownerrecord.OwnVerb, ownerrecord.PartitionsResource, ownerrecord.PartitionsGroup, r.Status.Reason)
		}
		return true, nil
	})

	labeler, err := ownerrecord.NewLabeler(meta, kube, pm, params, ownerrecord.LabelerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- labeler.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	framework.Eventually(t, 30*time.Second, "the labeler's informer synced", func(context.Context) (bool, error) {
		return labeler.HasSynced(), nil
	})
	framework.Eventually(t, 10*time.Second, "namespace "+target+" seen", func(context.Context) (bool, error) {
		return slices.Contains(labeler.NamespacesOf(p1), target), nil
	})
	fence, err := ownerrecord.NewFence(labeler, ownerrecord.FenceOptions{Params: params, Base: cfg, ProbeTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := fence.Claim(context.Background(), 1, framework.CertainTenure{})
	if err != nil {
		t.Fatalf("claiming the owner record (the term beacon) as %s: %v", coordSA, err)
	}
	if len(claimed.Owners) != 0 || claimed.HighestTerm != 0 || claimed.Forged != 0 {
		t.Errorf("a fresh record claimed as %+v", claimed)
	}
	beacon, err := f.Client.RbacV1().Roles(ns).Get(context.Background(), ownerrecord.TermRoleName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the term beacon: %v", err)
	}
	if beacon.Annotations[ownerrecord.TermAnnotation] != "1" || len(beacon.Rules) != 0 {
		t.Errorf("term beacon %s: annotations %v rules %+v", beacon.Name, beacon.Annotations, beacon.Rules)
	}
	// The partition label, written on every Namespace once the Labeler is active; the
	// probe needs a labelled namespace of the partition in the Labeler's informer.
	framework.Eventually(t, 30*time.Second, "namespace "+target+" carries its partition label", func(ctx context.Context) (bool, error) {
		got, err := f.Client.CoreV1().Namespaces().Get(ctx, target, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if v := got.Labels[label]; v != strconv.FormatUint(uint64(p1), 10) {
			return false, fmt.Errorf("label %s=%q, want %d", label, v, p1)
		}
		return labeler.Probeable(p1) != "", nil
	})

	// Create, update and delete owner Roles and RoleBindings, each batch enforced
	// (LocalSubjectAccessReviews, and the dry-run probe where the partition has a
	// labelled namespace). The Labeler's repair of the Roles may write a batch's change
	// before Set does: what counts is what the record says.
	for _, step := range []struct {
		what   string
		owners map[partition.ID]string
		want   map[string][]partition.ID // shard → the partitions its owner Role grants
		probe  bool
	}{
		{"grant p1 to shard-a: create a Role and a RoleBinding", map[partition.ID]string{p1: "shard-a"}, map[string][]partition.ID{"shard-a": {p1}}, true},
		{"grant p2 to shard-a: update its Role", map[partition.ID]string{p2: "shard-a"}, map[string][]partition.ID{"shard-a": sortedIDs(p1, p2)}, false},
		{"move p1 to shard-b: update shard-a's Role, create shard-b's", map[partition.ID]string{p1: "shard-b"},
			map[string][]partition.ID{"shard-a": {p2}, "shard-b": {p1}}, true},
		{"release p2: delete shard-a's Role and RoleBinding", map[partition.ID]string{p2: ""}, map[string][]partition.ID{"shard-b": {p1}}, false},
	} {
		a, err := fence.Apply(context.Background(), step.owners)
		if err != nil {
			t.Fatalf("%s, as %s: %v", step.what, coordSA, err)
		}
		t.Logf("%s: %d writes in %s, enforced %s later (%d reviews, %d probe rounds in %q)", step.what, a.Writes,
			a.Write.Round(time.Microsecond), a.Enforce.Round(time.Microsecond), a.Reviews, a.Probes, a.ProbeNamespace)
		if step.probe && (a.Reviews == 0 || a.Probes == 0) {
			t.Errorf("%s: enforcement not shown: %d reviews, %d probe rounds", step.what, a.Reviews, a.Probes)
		}
		checkOwnerRoles(t, f, params, step.want)
	}
	// p1 moved away from shard-a: the probe user is let through as shard-b and refused as
	// shard-a.
	probeB, err := ownerrecord.ProbeClient(cfg, params, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	probeA, err := ownerrecord.ProbeClient(cfg, params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if _, _, err := (ownerrecord.Prober{PolicyName: params.Name}).WaitEnforced(wctx, probeB, probeA, target); err != nil {
		t.Errorf("probing as shard-b (let through) and shard-a (refused) with the coordinator's RBAC: %v", err)
	}
	if _, err := fence.Apply(context.Background(), map[partition.ID]string{p1: ""}); err != nil {
		t.Fatalf("releasing p1 as %s: %v", coordSA, err)
	}
	checkOwnerRoles(t, f, params, nil)

	// The record Role's own rule is what the escalation check needs: with the Role's other
	// rules only, an owner Role is refused (under a name the record guard does not look
	// at, so that only RBAC decides).
	t.Run("without own on partitions", func(t *testing.T) {
		testEscalationRefused(t, f, params, p2)
	})

	// The record rights are the release namespace's only.
	elsewhere := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ownerrecord.OwnerRoleName("shard-a"), Namespace: target}}
	if _, err := kube.RbacV1().Roles(target).Create(context.Background(), elsewhere, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the coordinator creating a Role in namespace %s: %v; want Forbidden", target, err)
	}

	// The coordinator may not act as a shard (it could before the probe got a user of its
	// own: impersonate on the shard ServiceAccount, whose rights read every Secret of the
	// cluster; docs/architecture.md, "The fence's own guards").
	asShard, err := ownerrecord.ShardClient(cfg, params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asShard.CoreV1().Secrets(target).List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the coordinator listing Secrets as the shard ServiceAccount: %v; want Forbidden", err)
	} else {
		t.Logf("impersonating the shard refused as expected: %v", err)
	}
	// The fence check with the coordinator's RBAC: it learns its own user name and finds
	// the chart's objects as built.
	checkParams := params
	checkParams.CoordinatorUser = ""
	checker, err := ownerrecord.NewChecker(ownerrecord.CheckerOptions{Params: checkParams, Client: kube}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = checker.Run(ctx) }()
	framework.Eventually(t, 30*time.Second, "the fence check with the coordinator's RBAC finds the chart's fence enforced", func(context.Context) (bool, error) {
		if !checker.Enforced() {
			return false, fmt.Errorf("%v", checker.Status())
		}
		return true, nil
	})
}

// checkOwnerRoles checks that the owner record in params.Namespace is exactly want: per
// shard one owner Role granting its partitions, stamped with term 1, and one RoleBinding
// to the shard's owner subject; the term beacon besides.
func checkOwnerRoles(t *testing.T, f *framework.Framework, params ownerrecord.PolicyParams, want map[string][]partition.ID) {
	t.Helper()
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: ownerrecord.RecordLabel}
	roles, err := f.Client.RbacV1().Roles(params.Namespace).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := f.Client.RbacV1().RoleBindings(params.Namespace).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]partition.ID{}
	for _, r := range roles.Items {
		if r.Name == ownerrecord.TermRoleName {
			continue
		}
		shard, ok := strings.CutPrefix(r.Name, ownerrecord.OwnerRolePrefix)
		if !ok {
			t.Errorf("Role %s is labelled %s but is no owner Role", r.Name, ownerrecord.RecordLabel)
			continue
		}
		if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].APIGroups, []string{ownerrecord.PartitionsGroup}) ||
			!slices.Equal(r.Rules[0].Resources, []string{ownerrecord.PartitionsResource}) || !slices.Equal(r.Rules[0].Verbs, []string{ownerrecord.OwnVerb}) {
			t.Errorf("owner Role %s: rules %+v", r.Name, r.Rules)
			continue
		}
		if term := r.Annotations[ownerrecord.TermAnnotation]; term != "1" {
			t.Errorf("owner Role %s: term %q, want 1", r.Name, term)
		}
		for _, n := range r.Rules[0].ResourceNames {
			v, err := strconv.ParseUint(n, 10, 32)
			if err != nil {
				t.Errorf("owner Role %s grants %q", r.Name, n)
				continue
			}
			got[shard] = append(got[shard], partition.ID(v))
		}
		slices.Sort(got[shard])
	}
	if !apiequality.Semantic.DeepEqual(got, normalizeOwners(want)) {
		t.Errorf("owner Roles grant %v, want %v", got, want)
	}
	gotBindings := map[string]bool{}
	for _, b := range bindings.Items {
		shard, _ := strings.CutPrefix(b.Name, ownerrecord.OwnerRolePrefix)
		gotBindings[shard] = true
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: b.Name, Namespace: params.Namespace}}
		if b.RoleRef.Kind != "Role" || b.RoleRef.Name != b.Name || !apiequality.Semantic.DeepEqual(b.Subjects, wantSubjects) {
			t.Errorf("owner RoleBinding %s: roleRef %+v subjects %+v", b.Name, b.RoleRef, b.Subjects)
		}
	}
	for shard := range want {
		if !gotBindings[shard] {
			t.Errorf("shard %s has no owner RoleBinding", shard)
		}
		delete(gotBindings, shard)
	}
	if len(gotBindings) != 0 {
		t.Errorf("owner RoleBindings of shards that own nothing: %v", gotBindings)
	}
}

// testEscalationRefused checks that a ServiceAccount bound to the record Role's rules but
// its own on partitions may not create an owner-shaped Role: the API server's RBAC
// escalation check refuses granting what the writer does not hold.
func testEscalationRefused(t *testing.T, f *framework.Framework, params ownerrecord.PolicyParams, p partition.ID) {
	ctx := context.Background()
	const sa = "record-without-own"
	ns := params.Namespace
	if _, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := ownerrecord.RecordRole(params)
	role.Name = sa
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, ownerrecord.PartitionsGroup) })
	if _, err := f.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := f.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, f, ns, sa))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	framework.Eventually(t, 30*time.Second, sa+" may create Roles", func(ctx context.Context) (bool, error) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: rbacv1.GroupName, Resource: "roles", Verb: "create"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})
	owner := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "escalation-check", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{ownerrecord.PartitionsGroup}, Resources: []string{ownerrecord.PartitionsResource},
			Verbs: []string{ownerrecord.OwnVerb}, ResourceNames: []string{strconv.FormatUint(uint64(p), 10)}}},
	}
	_, err = client.RbacV1().Roles(ns).Create(ctx, owner, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "not currently held") {
		t.Errorf("creating an owner-shaped Role without %s on %s.%s: %v; want the escalation check's Forbidden",
			ownerrecord.OwnVerb, ownerrecord.PartitionsResource, ownerrecord.PartitionsGroup, err)
	} else {
		t.Logf("refused as expected: %v", err)
	}
}

// removeLabelWhenDone removes label from every Namespace when the test ends. The record
// guard refuses it to anyone but the coordinator until the API server has seen its
// binding go, so a refused removal is retried.
func removeLabelWhenDone(t *testing.T, f *framework.Framework, label string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		nss, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: label})
		if err != nil {
			t.Errorf("listing the namespaces with %s: %v", label, err)
			return
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label))
		for _, ns := range nss.Items {
			var last error
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				_, last = f.Client.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{})
				return last == nil || apierrors.IsNotFound(last), nil
			})
			if err != nil {
				t.Errorf("removing %s from namespace %s: %v", label, ns.Name, last)
			}
		}
	})
}

func sortedIDs(ids ...partition.ID) []partition.ID {
	slices.Sort(ids)
	return ids
}

// normalizeOwners drops shards without partitions (nil and empty want the same).
func normalizeOwners(m map[string][]partition.ID) map[string][]partition.ID {
	out := map[string][]partition.ID{}
	for s, ps := range m {
		if len(ps) > 0 {
			out[s] = ps
		}
	}
	return out
}

// applyFence applies the release's rendered fence policies and bindings, and deletes them
// when the test ends.
func applyFence(t *testing.T, f *framework.Framework, r *release) {
	t.Helper()
	var docs []string
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, u := range r.objs.Kind(kind) {
			b, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
			k, n := strings.ToLower(kind), u.GetName()
			t.Cleanup(func() {
				if out, err := runKubectl(t, f, "delete", k, n, "--ignore-not-found"); err != nil {
					t.Errorf("deleting %s %s: %v\n%s", k, n, err, out)
				}
			})
		}
	}
	path := filepath.Join(t.TempDir(), r.name+"-fence.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply (release %s fence):\n%s", r.name, kubectl(t, f, "apply", "-f", path))
}

func hasRule(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if len(r.ResourceNames) == 0 && slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func hasNamedRule(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.ResourceNames, name) && slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// normalizeCEL collapses the whitespace of every CEL expression of a policy spec.
func normalizeCEL(s admissionregistrationv1.ValidatingAdmissionPolicySpec) admissionregistrationv1.ValidatingAdmissionPolicySpec {
	s = *s.DeepCopy()
	n := func(e string) string { return strings.Join(strings.Fields(e), " ") }
	for i := range s.MatchConditions {
		s.MatchConditions[i].Expression = n(s.MatchConditions[i].Expression)
	}
	for i := range s.Variables {
		s.Variables[i].Expression = n(s.Variables[i].Expression)
	}
	for i := range s.Validations {
		s.Validations[i].Expression = n(s.Validations[i].Expression)
		s.Validations[i].MessageExpression = n(s.Validations[i].MessageExpression)
	}
	for i := range s.AuditAnnotations {
		s.AuditAnnotations[i].ValueExpression = n(s.AuditAnnotations[i].ValueExpression)
	}
	return s
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFencePrometheusRule renders the optional PrometheusRule: off by default and without
// the fence; on, it alerts per fence object that is not as built (kshard_fence_check) and
// when no coordinator reports the check, both scoped to the release's namespace.
func TestFencePrometheusRule(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want bool
	}{
		{name: "default off"},
		{name: "on", set: []string{"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.fenceFor=2m"}, want: true},
		{name: "on without the fence", set: []string{"metrics.prometheusRule.enabled=true", "shardFence.enabled=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := Render(t, "kshard", "kshard-system", nil, tc.set...)
			rules := objs.Kind("PrometheusRule")
			if (len(rules) == 1) != tc.want || len(rules) > 1 {
				t.Fatalf("%d PrometheusRules rendered, want it: %t", len(rules), tc.want)
			}
			if !tc.want {
				return
			}
			var rule struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
				Spec              struct {
					Groups []struct {
						Name  string `json:"name"`
						Rules []struct {
							Alert       string            `json:"alert"`
							Expr        string            `json:"expr"`
							For         string            `json:"for"`
							Labels      map[string]string `json:"labels"`
							Annotations map[string]string `json:"annotations"`
						} `json:"rules"`
					} `json:"groups"`
				} `json:"spec"`
			}
			Into(t, rules[0], &rule)
			alerts := map[string]string{}
			for _, g := range rule.Spec.Groups {
				for _, r := range g.Rules {
					alerts[r.Alert] = r.Expr
					if r.Alert == "KShardFenceNotEnforced" && r.For != "2m" {
						t.Errorf("KShardFenceNotEnforced for %q, want metrics.prometheusRule.fenceFor 2m", r.For)
					}
					if r.Labels["severity"] == "" || !strings.Contains(r.Annotations["summary"], "kshard") {
						t.Errorf("alert %s: labels %v annotations %v", r.Alert, r.Labels, r.Annotations)
					}
				}
			}
			for alert, want := range map[string][]string{
				"KShardFenceNotEnforced": {"kshard_fence_check", `namespace="kshard-system"`, `state!="ok"`},
				"KShardFenceCheckAbsent": {"absent(kshard_fence_enforced", `namespace="kshard-system"`},
			} {
				for _, w := range want {
					if !strings.Contains(alerts[alert], w) {
						t.Errorf("alert %s expr %q lacks %q", alert, alerts[alert], w)
					}
				}
			}
		})
	}
}
