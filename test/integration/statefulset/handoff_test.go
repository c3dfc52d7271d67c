package statefulset

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/test/framework"
)

// TestRolloutWhileNamespaceMoves: a StatefulSet's namespace is handed to another shard in
// the middle of a rolling update (a spare shard joins, then the owner gets SIGTERM: a
// graceful hand-over of all its partitions). The new owner finishes the rollout, and no
// ordinal is created twice: each pod name has exactly one pod of the update revision
// over the whole test, and none of those is ever deleted. Not parallel: it stops one of
// the package's shards.
func TestRolloutWhileNamespaceMoves(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the statefulset controller: no shards to move a namespace between")
	}
	k := c.KShard
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	log := e.watchPods(ctx)
	const replicas = 6
	e.create(newSet("web", replicas, func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 1 }))
	first := e.waitSet("web", 120*time.Second, "rolled out", rolledOut)

	spare := k.StartShard(fmt.Sprintf("shard-spare-%d", time.Now().UnixNano()%1e4))
	k.WaitAllOwned(t, 90*time.Second)
	framework.WaitHTTP(t, spare.HTTPURL+"/readyz", 60*time.Second)
	owner := k.StableOwner(t, e.ns)

	e.update("web", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = image2 })
	// Hand over once the rollout is under way but far from done.
	mid := e.waitSet("web", 60*time.Second, "rollout under way", func(s *appsv1.StatefulSet) bool {
		return s.Status.UpdateRevision != first.Status.UpdateRevision && s.Status.UpdatedReplicas >= 1
	})
	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var to string
	framework.Eventually(t, 90*time.Second, "namespace handed over", func(ctx context.Context) (bool, error) {
		o, err := k.NamespaceOwner(ctx, e.ns)
		if err != nil {
			return false, err
		}
		if o.Shard == owner.Name || o.State != "owned" {
			return false, fmt.Errorf("owner %+v", o)
		}
		to = o.Shard
		return true, nil
	})
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	k.WaitAllOwned(t, 90*time.Second)
	done := e.waitSet("web", 180*time.Second, "rollout finished by the new owner", rolledOut)
	t.Logf("handed over %s → %s %s after the rollout had %d of %d pods updated; finished at %s",
		owner.Name, to, time.Since(at).Round(time.Millisecond), mid.Status.UpdatedReplicas, replicas, done.Status.CurrentRevision)
	if mid.Status.UpdatedReplicas >= replicas {
		t.Errorf("the rollout was complete before the hand-over: the test moved nothing mid-rollout")
	}

	// The controller deleted each old pod once and nothing else (its SuccessfulDelete
	// events: a second owner working the namespace would delete a pod it did not see
	// replaced), and every live pod is of the update revision. Pods of the update revision
	// deleted by someone else are kwok's: it deletes by name, without a UID precondition,
	// and may play its pod-delete stage twice for one pod, the second time hitting the
	// pod just created under that name (docs/controllers.md); they are logged.
	framework.Eventually(t, 30*time.Second, "one SuccessfulDelete event per old pod", func(ctx context.Context) (bool, error) {
		list, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		perPod := map[string]int32{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "StatefulSet" && ev.Reason == "SuccessfulDelete" {
				perPod[ev.Message] += max(ev.Count, 1)
			}
		}
		if len(perPod) != replicas {
			return false, fmt.Errorf("SuccessfulDelete events %v, want one for each of the %d pods", perPod, replicas)
		}
		for msg, n := range perPod {
			if n != 1 {
				t.Errorf("%q recorded %d times: a pod of the update revision was deleted by the controller", msg, n)
			}
		}
		return true, nil
	})
	pods, err := e.pods(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, uids := log.snapshot()
	log.mu.Lock()
	defer log.mu.Unlock()
	for i := range replicas {
		name := fmt.Sprintf("web-%d", i)
		p, ok := pods[name]
		if !ok || p.Labels[appsv1.StatefulSetRevisionLabel] != done.Status.UpdateRevision {
			t.Errorf("%s: live pod at %q, want the update revision %s", name, p.Labels[appsv1.StatefulSetRevisionLabel], done.Status.UpdateRevision)
		}
		var updated []types.UID
		for _, u := range uids[name] {
			if log.revOf[u] == done.Status.UpdateRevision {
				updated = append(updated, u)
			}
		}
		if len(updated) > 1 {
			t.Logf("%s: %d pods of the update revision (%v), deleted by another than the controller", name, len(updated), updated)
		}
	}
}
