package chart

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/test/framework"
)

// TestTemplateShardGroups renders ci/shard-groups-values.yaml: one shard Deployment per
// shardGroups entry beside the default one, with the entry's values over shard's, its
// pods labelled with the group and run with --shard-group; a group's selector takes none
// of the default group's pods; the coordinator expects every Deployment's shards.
func TestTemplateShardGroups(t *testing.T) {
	objs, _ := Render(t, "kshard", "kshard-system", []string{filepath.Join(ChartDir(), "ci", "shard-groups-values.yaml")})
	var coord, def, hot, batch appsv1.Deployment
	Into(t, objs.Get(t, "Deployment", "kshard-coordinator"), &coord)
	Into(t, objs.Get(t, "Deployment", "kshard-shard"), &def)
	Into(t, objs.Get(t, "Deployment", "kshard-shard-hot"), &hot)
	Into(t, objs.Get(t, "Deployment", "kshard-shard-batch"), &batch)
	if n := len(objs.Kind("Deployment")); n != 4 {
		t.Errorf("%d Deployments, want the coordinator's and 3 shard Deployments", n)
	}
	if got := flagValue(coord.Spec.Template.Spec.Containers[0].Args, "--expected-shards"); got != "6" {
		t.Errorf("coordinator --expected-shards=%q, want 6 (3 default + 2 hot + 1 batch)", got)
	}
	tests := []struct {
		name                 string
		d                    *appsv1.Deployment
		group                string
		replicas             int32
		qps, burst, memLimit string
		nodeSelector         map[string]string
	}{
		{name: "default group", d: &def, replicas: 3, qps: "50", burst: "100", memLimit: "2Gi"},
		{name: "hot", d: &hot, group: "hot", replicas: 2, qps: "200", burst: "400", memLimit: "4Gi", nodeSelector: map[string]string{"kshard.io/pool": "hot"}},
		{name: "batch", d: &batch, group: "batch", replicas: 1, qps: "50", burst: "100", memLimit: "2Gi"},
	}
	defSelector, err := metav1.LabelSelectorAsSelector(def.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			checkHardened(t, d)
			checkShardAuth(t, objs, "kshard", "kshard-system", &coord, d)
			spec := d.Spec.Template.Spec
			args := spec.Containers[0].Args
			podLabels := d.Spec.Template.Labels
			if *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas %d, want %d", *d.Spec.Replicas, tc.replicas)
			}
			if got := flagValue(args, "--shard-group"); got != tc.group || (tc.group == "" && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--shard-group") })) {
				t.Errorf("--shard-group=%q in %v, want %q", got, args, tc.group)
			}
			if got, ok := podLabels[shardauth.GroupLabel]; got != tc.group || ok != (tc.group != "") {
				t.Errorf("pod label %s=%q (present %v), want %q", shardauth.GroupLabel, got, ok, tc.group)
			}
			if got := d.Labels[shardauth.GroupLabel]; got != tc.group {
				t.Errorf("Deployment label %s=%q, want %q", shardauth.GroupLabel, got, tc.group)
			}
			if podLabels["app.kubernetes.io/component"] != "shard" {
				t.Errorf("pod labels %v: not a shard's (the metrics Service, the budget and the fence's checks select component=shard)", podLabels)
			}
			if flagValue(args, "--kube-api-qps") != tc.qps || flagValue(args, "--kube-api-burst") != tc.burst {
				t.Errorf("client budget %s/%s, want %s/%s", flagValue(args, "--kube-api-qps"), flagValue(args, "--kube-api-burst"), tc.qps, tc.burst)
			}
			// Maps merge deeply: the group's memory limit, shard's requests.
			res := spec.Containers[0].Resources
			if res.Limits.Memory().String() != tc.memLimit || res.Requests.Cpu().String() != "200m" {
				t.Errorf("resources %+v, want memory limit %s and shard's cpu request 200m", res, tc.memLimit)
			}
			if !maps.Equal(spec.NodeSelector, tc.nodeSelector) {
				t.Errorf("nodeSelector %v, want %v", spec.NodeSelector, tc.nodeSelector)
			}
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(podLabels)) {
				t.Errorf("selector %s does not select its own pods %v", sel, podLabels)
			}
			if tc.group != "" {
				// A group's Deployment must not count the default group's pods (nor another
				// group's); the default one selects every shard pod, by design.
				if sel.Matches(labels.Set(def.Spec.Template.Labels)) {
					t.Errorf("selector %s takes the default group's pods", sel)
				}
				if !defSelector.Matches(labels.Set(podLabels)) {
					t.Errorf("the default selector %s does not see the group's pods (the shard metrics Service selects likewise)", defSelector)
				}
				for _, c := range spec.TopologySpreadConstraints {
					if c.LabelSelector == nil || c.LabelSelector.MatchLabels[shardauth.GroupLabel] != tc.group {
						t.Errorf("topology spread %+v: not over the group's pods", c)
					}
				}
			}
		})
	}
	if sel, _ := metav1.LabelSelectorAsSelector(hot.Spec.Selector); sel.Matches(labels.Set(batch.Spec.Template.Labels)) {
		t.Errorf("hot's selector %s takes batch's pods", sel)
	}
}

// TestTemplateShardGroupsRefused: a group name that cannot be a label value or a
// Deployment name's suffix, or a group listed twice, fails the render naming it.
func TestTemplateShardGroupsRefused(t *testing.T) {
	tests := []struct {
		name    string
		set     []string
		wantErr string
	}{
		{name: "upper case", set: []string{"shardGroups[0].name=Hot", "shardGroups[0].replicas=1"}, wantErr: "shardGroups"},
		{name: "listed twice", set: []string{"shardGroups[0].name=hot", "shardGroups[0].replicas=1", "shardGroups[1].name=hot", "shardGroups[1].replicas=1"},
			wantErr: `group "hot" is listed twice`},
		{name: "no replicas", set: []string{"shardGroups[0].name=hot"}, wantErr: "replicas"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "kshard", ChartDir(), "--namespace", "kshard-system"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := RunHelm(t, args...)
			if err == nil || !strings.Contains(out, tc.wantErr) {
				t.Fatalf("helm template %v: %v, output lacks %q:\n%s", tc.set, err, tc.wantErr, out)
			}
		})
	}
}

// waitAllowedIn waits until the ServiceAccount namespace/sa may verb resource in the
// namespace (a namespaced Role's grant, which a cluster-wide review does not see).
func waitAllowedIn(t *testing.T, f *framework.Framework, namespace, sa, resource, verb string) {
	t.Helper()
	user := "system:serviceaccount:" + namespace + ":" + sa
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("%s may %s %s in %s", user, verb, resource, namespace), func(ctx context.Context) (bool, error) {
		r, err := f.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Resource: resource, Verb: verb},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if !r.Status.Allowed {
			return false, fmt.Errorf("not yet allowed")
		}
		return true, nil
	})
}
