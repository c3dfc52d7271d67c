// Package controlplane checks that the local control plane the other integration tests
// stand on really works: fake nodes are Ready, pods get scheduled and turn Running, Job
// pods complete, and the apiserver honours KEP-5866 shard selectors.
package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// TestMain runs the workload controllers in kshard when the cluster's
// kube-controller-manager leaves them to kshard (the default cluster does), so a
// Deployment's and a Job's pods run whichever side owns the controllers.
func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names: []string{"replicaset", "deployment", "job"}, Coordinators: 1, Shards: 1,
	})
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

func TestFakeNodesAreReady(t *testing.T) {
	f := framework.Get(t)
	nodes, err := f.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("no kwok nodes")
	}
	for _, n := range nodes.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			t.Errorf("node %s is not Ready: %+v", n.Name, n.Status.Conditions)
		}
	}
}

func TestDeploymentPodsRunOnFakeNodes(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	labels := map[string]string{"app": "sample"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sample"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(labels),
		},
	}
	ctx := context.Background()
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "3 pods Running and Ready on kwok nodes", func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					running++
				}
			}
		}
		if running != 3 {
			return false, fmt.Errorf("%d of %d pods running and ready", running, len(pods.Items))
		}
		return true, nil
	})
	framework.Eventually(t, 60*time.Second, "deployment Available with 3 available replicas", func(ctx context.Context) (bool, error) {
		got, err := f.Client.AppsV1().Deployments(ns).Get(ctx, "sample", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Status.AvailableReplicas != 3 {
			return false, fmt.Errorf("status %+v", got.Status)
		}
		return true, nil
	})
}

func TestJobPodsComplete(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](2),
			Template:    podTemplate(map[string]string{"app": "once"}),
		},
	}
	job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := f.Client.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "job Complete", func(ctx context.Context) (bool, error) {
		got, err := f.Client.BatchV1().Jobs(ns).Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return got.Status.Succeeded == 2, nil
			}
		}
		return false, fmt.Errorf("status %+v", got.Status)
	})
}

// TestShardSelectorIsHonoured checks the ShardedListAndWatch gate: a list with a
// shardSelector echoes it in metadata.shardInfo, and a selector covering no namespace hash
// returns none of our objects while the full range returns them.
func TestShardSelectorIsHonoured(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The half of the hash space that does not hold our namespace's hash.
	other := "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
	if !sharding.HexLess("0x"+sharding.HashField(ns), "0x8000000000000000") {
		other = "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')"
	}
	tests := []struct {
		name     string
		selector string
		wantOurs bool
	}{
		{name: "full range", selector: "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')", wantOurs: true},
		{name: "other half", selector: other, wantOurs: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/configmaps").
				Param("shardSelector", tc.selector).DoRaw(context.Background())
			if err != nil {
				t.Fatalf("list with shardSelector: %v", err)
			}
			var list struct {
				Metadata struct {
					ShardInfo *struct {
						Selector string `json:"selector"`
					} `json:"shardInfo"`
				} `json:"metadata"`
				Items []corev1.ConfigMap `json:"items"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatal(err)
			}
			if list.Metadata.ShardInfo == nil || list.Metadata.ShardInfo.Selector == "" {
				t.Fatalf("metadata.shardInfo not echoed: is ShardedListAndWatch on? %.300s", raw)
			}
			ours := false
			for _, item := range list.Items {
				if item.Namespace == ns && item.Name == "probe" {
					ours = true
				}
			}
			if ours != tc.wantOurs {
				t.Errorf("our configmap listed = %v, want %v (%d items)", ours, tc.wantOurs, len(list.Items))
			}
		})
	}
}
