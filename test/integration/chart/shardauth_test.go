package chart

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// Shard authentication as the chart wires it (shardAuth.mode=token): the shard mounts its
// own projected token for the coordinator's audience and names it with
// --coordinator-token-file; the coordinator reviews it (--shard-auth=token, its own
// ClusterRole for tokenreviews) and accepts only the shard ServiceAccount.

const shardTokenVolume = "coordinator-token"

// checkShardAuth checks the token wiring of a render with shardAuth at its defaults.
func checkShardAuth(t *testing.T, objs Objects, release, namespace string, coord, shard *appsv1.Deployment) {
	t.Helper()
	coordArgs, shardArgs := coord.Spec.Template.Spec.Containers[0].Args, shard.Spec.Template.Spec.Containers[0].Args
	wantSA := namespace + "/" + shard.Spec.Template.Spec.ServiceAccountName
	if got := flagValue(coordArgs, "--shard-auth"); got != "token" {
		t.Errorf("coordinator --shard-auth=%q, want token", got)
	}
	if got := flagValue(coordArgs, "--shard-service-account"); got != wantSA {
		t.Errorf("coordinator --shard-service-account=%q, want %q (the shard Deployment's ServiceAccount)", got, wantSA)
	}
	audience := flagValue(coordArgs, "--shard-token-audience")
	if audience != "kshard-coordinator" {
		t.Errorf("coordinator --shard-token-audience=%q, want kshard-coordinator", audience)
	}
	if flagValue(coordArgs, "--max-shards") == "" {
		t.Errorf("coordinator has no --max-shards: %v", coordArgs)
	}

	// The shard's token file lies in a projected ServiceAccount token volume of the same
	// audience, bound to the pod (projected tokens always are).
	file := flagValue(shardArgs, "--coordinator-token-file")
	var mount *corev1.VolumeMount
	for i, m := range shard.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == shardTokenVolume {
			mount = &shard.Spec.Template.Spec.Containers[0].VolumeMounts[i]
		}
	}
	if mount == nil || file == "" || filepath.Dir(file) != mount.MountPath {
		t.Fatalf("shard --coordinator-token-file=%q is not in the %s volume mount %+v", file, shardTokenVolume, mount)
	}
	var src *corev1.ServiceAccountTokenProjection
	for _, v := range shard.Spec.Template.Spec.Volumes {
		if v.Name == shardTokenVolume && v.Projected != nil && len(v.Projected.Sources) == 1 {
			src = v.Projected.Sources[0].ServiceAccountToken
		}
	}
	if src == nil || src.Path != filepath.Base(file) || src.Audience != audience || src.ExpirationSeconds == nil || *src.ExpirationSeconds != 3600 {
		t.Errorf("shard token volume source %+v, want a serviceAccountToken at %s for audience %q expiring in 3600s", src, filepath.Base(file), audience)
	}

	// The coordinator may create TokenReviews, and nothing else through this role.
	name := release + "-token-review-" + namespace
	var role rbacv1.ClusterRole
	Into(t, objs.Get(t, "ClusterRole", name), &role)
	grants, err := GrantsOfRules(role.Rules)
	if err != nil {
		t.Fatal(err)
	}
	want := Grant{"authentication.k8s.io", "tokenreviews", "create"}
	if len(grants) != 1 || !grants[want] {
		t.Errorf("ClusterRole %s grants %v, want only %s", name, grants, want)
	}
	// It reads the pod a shard's token is bound to (its UID and kshard.io/shard-group
	// label, the group the session claims) in the release namespace, get only.
	var coordRole rbacv1.Role
	Into(t, objs.Get(t, "Role", coord.Name), &coordRole) // the coordinator Role is named as its Deployment
	if !hasRule(coordRole.Rules, "", "pods", "get") || hasRule(coordRole.Rules, "", "pods", "list") || hasRule(coordRole.Rules, "", "pods", "update") {
		t.Errorf("coordinator Role %s rules %+v, want get on pods (the shard's pod, for its group) and no more on pods", coordRole.Name, coordRole.Rules)
	}
	var binding rbacv1.ClusterRoleBinding
	Into(t, objs.Get(t, "ClusterRoleBinding", name), &binding)
	if binding.RoleRef.Name != name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != coord.Spec.Template.Spec.ServiceAccountName ||
		binding.Subjects[0].Namespace != namespace {
		t.Errorf("ClusterRoleBinding %s: roleRef %s, subjects %+v; want the coordinator's ServiceAccount", name, binding.RoleRef.Name, binding.Subjects)
	}
}

// TestTemplateShardAuthNone: shardAuth.mode=none is an explicit choice that leaves
// nothing of the token wiring behind.
func TestTemplateShardAuthNone(t *testing.T) {
	objs, _ := Render(t, "kshard", "kshard-system", nil, "shardAuth.mode=none")
	var coord, shard appsv1.Deployment
	Into(t, objs.Get(t, "Deployment", "kshard-coordinator"), &coord)
	Into(t, objs.Get(t, "Deployment", "kshard-shard"), &shard)
	if got := flagValue(coord.Spec.Template.Spec.Containers[0].Args, "--shard-auth"); got != "none" {
		t.Errorf("coordinator --shard-auth=%q, want none", got)
	}
	if slices.ContainsFunc(shard.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--coordinator-token-file") }) {
		t.Errorf("shard still gets --coordinator-token-file")
	}
	for _, v := range shard.Spec.Template.Spec.Volumes {
		if v.Name == shardTokenVolume {
			t.Errorf("shard still mounts %s", shardTokenVolume)
		}
	}
	for _, u := range objs.Kind("ClusterRole") {
		if strings.Contains(u.GetName(), "token-review") {
			t.Errorf("ClusterRole %s rendered with shardAuth.mode=none", u.GetName())
		}
	}
	// Shard groups are trusted as shard IDs are: no pod is read.
	var coordRole rbacv1.Role
	Into(t, objs.Get(t, "Role", "kshard-coordinator"), &coordRole)
	if hasRule(coordRole.Rules, "", "pods", "get") {
		t.Errorf("coordinator Role may get pods with shardAuth.mode=none: %+v", coordRole.Rules)
	}
}

// withoutShardToken returns a copy of the shard Deployment without its projected token
// (volume, mount and --coordinator-token-file), for running it as a local process next to
// a coordinator with --shard-auth=none: the chart's RBAC proof runs the containers as
// local processes without pods (framework.KShardOptions.PodIdentity gives other tests a
// pod and pod-bound tokens per shard).
func withoutShardToken(d *appsv1.Deployment) *appsv1.Deployment {
	d = d.DeepCopy()
	spec := &d.Spec.Template.Spec
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == shardTokenVolume })
	c := &spec.Containers[0]
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == shardTokenVolume })
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--coordinator-token-file=") })
	return d
}
