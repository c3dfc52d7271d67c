package sharding

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/controllers/deployment"
	"github.com/kshard/kshard/pkg/controllers/replicaset"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/test/framework"
)

// TestPodIdentity runs the shards as a cluster runs their pods: each shard talks to the
// API server with its own pod-bound ServiceAccount token (RBAC derived from the code, no
// admin rights) and proves its shard ID to the coordinator (--shard-auth=token) with a
// second token of that pod. A process that claims a shard ID its token does not prove, or
// a shard group its pod is not in (the pod's kshard.io/shard-group label), is refused,
// and the real shards keep their partitions meanwhile.
func TestPodIdentity(t *testing.T) {
	f := framework.Get(t)
	ctx := context.Background()
	k := f.NewKShard(t, framework.KShardOptions{PodIdentity: true, SessionTTL: ttl, Margin: margin})
	ns, sa := k.PodNamespace(), k.ServiceAccount()
	if ns == "" || sa != framework.ShardServiceAccount {
		t.Fatalf("PodIdentity KShard has namespace %q and ServiceAccount %q", ns, sa)
	}
	user := shardauth.ServiceAccountUser(ns, sa)

	k.StartCoordinator("coordinator-a")
	shards := []string{"shard-1", "shard-2"}
	for _, id := range shards {
		s := k.StartShard(id)
		if i := slices.Index(s.Args, "--kubeconfig"); i < 0 || s.Args[i+1] == f.Kubeconfig {
			t.Fatalf("%s was started with the admin kubeconfig: %v", id, s.Args)
		}
	}
	start := time.Now()
	k.WaitAllOwned(t, 90*time.Second)
	for _, id := range shards {
		framework.WaitHTTP(t, k.Shards[id].HTTPURL+"/readyz", 60*time.Second)
	}
	leader, err := k.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := leader.Assignments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := framework.Owners(before)
	if len(owners) != before.PartitionCount {
		t.Fatalf("%d of %d partitions owned", len(owners), before.PartitionCount)
	}
	t.Logf("2 shards with pod identities own all %d partitions %s after start", len(owners), time.Since(start).Round(time.Millisecond))

	t.Run("the API server sees each shard as its pod", func(t *testing.T) {
		for _, id := range shards {
			cs, err := kubernetes.NewForConfig(k.ShardRESTConfig(id))
			if err != nil {
				t.Fatal(err)
			}
			r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ui := r.Status.UserInfo
			if ui.Username != user || !slices.Equal(ui.Extra[shardauth.ExtraPodName], authenticationv1.ExtraValue{id}) {
				t.Errorf("shard %s authenticates as %q with pod %v; want %q with pod %s", id, ui.Username, ui.Extra[shardauth.ExtraPodName], user, id)
			}
		}
	})

	t.Run("a Deployment gets its ReplicaSet and pods", func(t *testing.T) {
		appNS := f.Namespace(t, nil).Name
		d := framework.NewRollingDeployment("web", 2, intstr.FromInt32(1), intstr.FromInt32(0), "registry.example/web:1", nil)
		d, err := f.Client.AppsV1().Deployments(appNS).Create(ctx, d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		framework.Eventually(t, 60*time.Second, "the Deployment's rollout completes", func(ctx context.Context) (bool, error) {
			rss, err := f.Client.AppsV1().ReplicaSets(appNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			if n := ownedBy(rss.Items, d.UID); n != 1 {
				return false, fmt.Errorf("%d ReplicaSets owned by the Deployment", n)
			}
			got, err := f.Client.AppsV1().Deployments(appNS).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if err := framework.DeploymentComplete(got); err != nil {
				return false, err
			}
			return true, nil
		})
		t.Logf("Deployment complete %s after creation", time.Since(at).Round(time.Millisecond))
		// The shards' events, written through their own identity too.
		framework.Eventually(t, 30*time.Second, "the controllers' events are recorded", func(ctx context.Context) (bool, error) {
			evs, err := f.Client.CoreV1().Events(appNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			var reasons []string
			for _, e := range evs.Items {
				reasons = append(reasons, e.Reason)
			}
			for _, want := range []string{deployment.EventScalingReplicaSet, replicaset.ReasonSuccessfulCreate} {
				if !slices.Contains(reasons, want) {
					return false, fmt.Errorf("no %s event among %v", want, reasons)
				}
			}
			return true, nil
		})
	})

	id1 := k.ShardIdentity("shard-1")
	apiTokenFile := filepath.Join(t.TempDir(), "api-audience-token")
	if err := os.WriteFile(apiTokenFile, []byte(id1.APIToken), 0o600); err != nil {
		t.Fatal(err)
	}
	// A token bound to a pod that was deleted since.
	gone := k.ShardIdentity("shard-gone")
	k.DeleteShardPod("shard-gone")
	// A valid token of a pod in the default group, whose shard claims group hot.
	forger := k.ShardIdentity("shard-g")
	k.SetShardArgs(func(name string) []string {
		if name == "shard-g" {
			return []string{"--shard-group", "hot"}
		}
		return nil
	})

	// Each impostor talks to the API server as shard-1 (the shard checks its permissions
	// before it says Hello), and to the coordinator with the token of the case.
	cases := []struct {
		name, shard, tokenFile, reason string
	}{
		{"another shard's pod token", "shard-x", id1.CoordinatorTokenFile, shardauth.ReasonPodNameMismatch},
		{"the pod's API-audience token", "shard-y", apiTokenFile, shardauth.ReasonInvalidToken},
		{"a deleted pod's token", "shard-gone", gone.CoordinatorTokenFile, shardauth.ReasonInvalidToken},
		{"no token", "shard-z", "", shardauth.ReasonMissingToken},
		{"a group its pod is not in", "shard-g", forger.CoordinatorTokenFile, shardauth.ReasonGroupMismatch},
	}
	for _, tc := range cases {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			metric := func(ctx context.Context, name string, match ...string) float64 {
				t.Helper()
				v, err := framework.Metric(ctx, leader.HTTPURL, name, match...)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			reason := fmt.Sprintf("reason=%q", tc.reason)
			rejected := metric(ctx, "kshard_coordinator_auth_rejected_total", reason)
			moves := metric(ctx, "kshard_coordinator_moves_started_total")
			s := k.StartShardAs(tc.shard, framework.ShardCredentials{Kubeconfig: id1.Kubeconfig, CoordinatorTokenFile: tc.tokenFile})
			defer s.Kill()
			framework.Eventually(t, 30*time.Second, "the coordinator refuses "+tc.shard+" for "+tc.reason, func(ctx context.Context) (bool, error) {
				if s.Exited() {
					return false, fmt.Errorf("%s exited (log %s)", tc.shard, s.LogPath)
				}
				v, err := framework.Metric(ctx, leader.HTTPURL, "kshard_coordinator_auth_rejected_total", reason)
				if err != nil {
					return false, err
				}
				if v <= rejected {
					return false, fmt.Errorf("kshard_coordinator_auth_rejected_total{%s} still %v", reason, v)
				}
				return true, nil
			})
			// Long enough for a second attempt after the shard's backoff.
			time.Sleep(3 * time.Second)
			if code, _, err := framework.HTTPGet(ctx, s.HTTPURL+"/readyz"); err == nil && code == http.StatusOK {
				t.Errorf("%s is Ready: it has a welcomed session", tc.shard)
			}
			a, err := leader.Assignments(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range a.Shards {
				if v.Shard == tc.shard {
					t.Errorf("the coordinator lists %s as a member: %+v", tc.shard, v)
				}
			}
			if !a.Converged || !equalOwners(owners, framework.Owners(a)) {
				t.Errorf("the real shards' partitions changed: converged %v, %d of %d owners differ", a.Converged, diffOwners(owners, framework.Owners(a)), len(owners))
			}
			if m := metric(ctx, "kshard_coordinator_moves_started_total"); m != moves {
				t.Errorf("%v moves started while %s was refused", m-moves, tc.shard)
			}
			if l, err := k.Leader(ctx); err != nil || l != leader {
				t.Errorf("leader is %v (%v); want %s still leading", l, err, leader.Name)
			}
		})
	}

	for _, id := range shards {
		if k.Shards[id].Exited() {
			t.Errorf("%s exited", id)
		}
	}

	// A restarted shard process is the same pod's new container: same pod, same tokens.
	t.Run("a restarted shard keeps its pod", func(t *testing.T) {
		before := k.ShardIdentity("shard-2")
		old := k.Shards["shard-2"]
		if err := old.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = old.Wait(10 * time.Second)
		restarted := k.StartShard("shard-2")
		pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, "shard-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.UID != before.UID || k.ShardIdentity("shard-2").UID != before.UID {
			t.Errorf("pod shard-2 is %s after the restart, was %s", pod.UID, before.UID)
		}
		// Ready only with a session the coordinator welcomed, after it verified the token.
		framework.WaitHTTP(t, restarted.HTTPURL+"/readyz", 60*time.Second)
		k.WaitAllOwned(t, 90*time.Second)
	})
}

// ownedBy counts the ReplicaSets whose controller is the object with uid.
func ownedBy(rss []appsv1.ReplicaSet, uid types.UID) int {
	n := 0
	for _, rs := range rss {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == uid {
			n++
		}
	}
	return n
}
