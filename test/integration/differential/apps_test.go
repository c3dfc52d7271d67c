package differential

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/test/framework"
)

// The Deployment, ReplicaSet and ReplicationController scenario: Deployments of every
// strategy, a ReplicaSet that adopts orphans, a quota, scale, image changes, pause and
// resume, undo, adoption and release, then ReplicationControllers (replicationcontroller_test.go).
// ReplicaSets are keyed by Deployment and image, pods counted per ReplicaSet or
// ReplicationController.

const (
	imageV1 = "registry.k8s.io/e2e/app:v1"
	imageV2 = "registry.k8s.io/e2e/app:v2"
	imageV3 = "registry.k8s.io/e2e/app:v3"
	// orphanLabel selects the bare ReplicaSet's pods.
	orphanLabel = "kshard.io/e2e-orphans"
)

func TestDifferentialAgainstUpstream(t *testing.T) {
	scenario{
		controllers: []string{"replicaset", "deployment", "replicationcontroller", "resourcequota"},
		namespaces:  []string{"main", "quota"},
		steps:       append(append([]step{}, appsSteps...), rcSteps...),
		snapshot:    appsSnapshot,
	}.run(t)
}

func deployment(name string, replicas int32, surge, unavailable string) *appsv1.Deployment {
	d := framework.NewRollingDeployment(name, replicas, intstr.Parse(surge), intstr.Parse(unavailable), imageV1, nil)
	return d
}

func (s *side) createDeployments(ctx context.Context, ns string, ds ...*appsv1.Deployment) error {
	for _, d := range ds {
		if _, err := s.f.Client.AppsV1().Deployments(s.ns[ns]).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", d.Name, err)
		}
	}
	return nil
}

func orphanPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{orphanLabel: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imageV1}}, TerminationGracePeriodSeconds: new(int64)},
	}
}

var appsSteps = []step{
	{name: "create Deployments of every strategy and a ReplicaSet that adopts orphans", do: func(ctx context.Context, s *side) error {
		recreate := deployment("recreate", 2, "0", "0")
		recreate.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		minReady := deployment("minready", 2, "1", "0")
		minReady.Spec.MinReadySeconds = 3
		history := deployment("history", 1, "1", "0")
		history.Spec.RevisionHistoryLimit = new(int32(1))
		if err := s.createDeployments(ctx, "main",
			deployment("rolling", 3, "1", "0"), deployment("percent", 4, "25%", "25%"), recreate, minReady, history); err != nil {
			return err
		}
		for _, name := range []string{"orphan-a", "orphan-b"} {
			if _, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Create(ctx, orphanPod(name), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		// The ReplicaSet comes once its controller can have seen the orphans: when they run
		// (scheduled and started by kwok, so their creation was long sent to every watch).
		// Created at the same instant, the controller may count one orphan short and
		// create a pod too many, which upstream does too; that race is not the scenario.
		err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: orphanLabel})
			if err != nil {
				return false, err
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == 2, nil
		})
		if err != nil {
			return fmt.Errorf("orphan pods not running: %w", err)
		}
		three := int32(3)
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "orphans"},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: &three,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{orphanLabel: "true"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{orphanLabel: "true"}},
					Spec: orphanPod("").Spec},
			},
		}
		_, err = s.f.Client.AppsV1().ReplicaSets(s.ns["main"]).Create(ctx, rs, metav1.CreateOptions{})
		return err
	}},
	{name: "a Deployment beyond its namespace's pod quota", do: func(ctx context.Context, s *side) error {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
		if _, err := s.f.Client.CoreV1().ResourceQuotas(s.ns["quota"]).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return err
		}
		// Admission enforces a quota once the quota controller has filled its status in.
		err := pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			got, err := s.f.Client.CoreV1().ResourceQuotas(s.ns["quota"]).Get(ctx, "pods", metav1.GetOptions{})
			return err == nil && len(got.Status.Hard) > 0, err
		})
		if err != nil {
			return fmt.Errorf("quota status: %w", err)
		}
		return s.createDeployments(ctx, "quota", deployment("over-quota", 4, "25%", "25%"))
	}},
	{name: "scale", do: func(ctx context.Context, s *side) error {
		for _, a := range [][]string{{"deployment/rolling", "5"}, {"deployment/percent", "2"}, {"replicaset/orphans", "2"}} {
			if err := s.kubectl(ctx, "main", "scale", a[0], "--replicas="+a[1]); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "set image", do: func(ctx context.Context, s *side) (err error) {
		// The Recreate rollout's old pods are held (holdFinalizer) and let go one at a time,
		// each once the controller has settled: see holdRecreate.
		held, release, err := s.holdRecreate(ctx)
		defer func() {
			if rErr := release(context.WithoutCancel(ctx), held...); err == nil {
				err = rErr
			}
		}()
		if err != nil {
			return err
		}
		for _, d := range []string{"rolling", "percent", "recreate", "minready", "history"} {
			if err := s.kubectl(ctx, "main", "set", "image", "deployment/"+d, "app="+imageV2); err != nil {
				return err
			}
		}
		for i, name := range held {
			if err := s.awaitRecreateTerminating(ctx, int32(len(held)-i)); err != nil {
				return err
			}
			if err := release(ctx, name); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "pause, then change image and scale while paused", do: func(ctx context.Context, s *side) error {
		for _, args := range [][]string{
			{"rollout", "pause", "deployment/percent"},
			{"set", "image", "deployment/percent", "app=" + imageV3},
			{"scale", "deployment/percent", "--replicas=3"},
			{"set", "image", "deployment/history", "app=" + imageV3},
		} {
			if err := s.kubectl(ctx, "main", args...); err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "resume", do: func(ctx context.Context, s *side) error {
		return s.kubectl(ctx, "main", "rollout", "resume", "deployment/percent")
	}},
	{name: "rollout undo, and undo to a revision", do: func(ctx context.Context, s *side) error {
		if err := s.kubectl(ctx, "main", "rollout", "undo", "deployment/rolling"); err != nil {
			return err
		}
		return s.kubectl(ctx, "main", "rollout", "undo", "deployment/history", "--to-revision=2")
	}},
	{name: "an orphan is adopted, a relabelled pod released", do: func(ctx context.Context, s *side) error {
		if _, err := s.f.Client.CoreV1().Pods(s.ns["main"]).Create(ctx, orphanPod("orphan-c"), metav1.CreateOptions{}); err != nil {
			return err
		}
		// Release: one of the ReplicaSet's pods stops matching its selector. Which pods the
		// earlier scale-down left is the deletion ranking's choice among equals, so take
		// the first by name.
		pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: orphanLabel + "=true"})
		if err != nil {
			return err
		}
		var owned []string
		for _, p := range pods.Items {
			if metav1.GetControllerOf(&p) != nil && p.DeletionTimestamp == nil {
				owned = append(owned, p.Name)
			}
		}
		if len(owned) == 0 {
			return fmt.Errorf("the ReplicaSet orphans has no pods to release")
		}
		sort.Strings(owned)
		return s.kubectl(ctx, "main", "label", "pod/"+owned[0], orphanLabel+"=released", "--overwrite")
	}},
}

// holdFinalizer keeps the Recreate Deployment's old pods, once deleted, terminating
// until the scenario lets them go.
const holdFinalizer = "kshard.io/e2e-hold"

// holdRecreate puts holdFinalizer on the Recreate Deployment's pods and returns their
// names and the function that takes it off the named pods again.
//
// Why: a Recreate rollout scales the old ReplicaSet to 0 and creates the new one, writing
// Progressing "Created new replica set", at the first sync that finds the old pods gone.
// That write sends the Deployment from the controller's cache; if the controller wrote the
// Deployment's status a moment before (at the last old pods' deletion, pods with grace
// period 0 on kwok vanish at once and the ReplicaSet's status moves with them) the cache
// can lack that write, the "Created" write fails on the stale resourceVersion, the retry
// finds the new ReplicaSet existing and writes no condition, and the Progressing condition
// from before the rollout (NewReplicaSetAvailable, naming the old ReplicaSet) stays for
// good: every later sync counts the rollout complete. Upstream's own controller loses
// that race on a loaded machine (seen on the upstream side, and with upstream against
// itself), so the scenario takes it away: the old pods go one at a time, each once the
// Deployment's status shows the pods still terminating and has not been written for a
// while. After the last one, no status write of the Deployment precedes the sync that
// creates the new ReplicaSet (the controller's pod cache, shared with the ReplicaSet
// controller's, has the pod gone before the ReplicaSet's status can say so).
func (s *side) holdRecreate(ctx context.Context) ([]string, func(context.Context, ...string) error, error) {
	release := func(ctx context.Context, names ...string) error {
		for _, name := range names {
			err := mergePatch(ctx, s.f.Client.CoreV1().Pods(s.ns["main"]), name, `{"metadata":{"finalizers":null}}`)
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("releasing pod %s: %w", name, err)
			}
		}
		return nil
	}
	pods, err := s.f.Client.CoreV1().Pods(s.ns["main"]).List(ctx, metav1.ListOptions{LabelSelector: framework.RolloutApp + "=recreate"})
	if err != nil {
		return nil, release, err
	}
	var held []string
	for _, p := range pods.Items {
		if err := mergePatch(ctx, s.f.Client.CoreV1().Pods(s.ns["main"]), p.Name, `{"metadata":{"finalizers":["`+holdFinalizer+`"]}}`); err != nil {
			return held, release, fmt.Errorf("holding pod %s: %w", p.Name, err)
		}
		held = append(held, p.Name)
	}
	if len(held) == 0 {
		return nil, release, fmt.Errorf("the Recreate Deployment has no pods to hold")
	}
	sort.Strings(held)
	return held, release, nil
}

// awaitRecreateTerminating waits until the Recreate Deployment's status shows the
// rollout's intermediate state, the new generation observed, nothing updated yet and
// terminating old pods, and has not been written for 2s (the controller's cache has its
// last write).
func (s *side) awaitRecreateTerminating(ctx context.Context, terminating int32) error {
	var lastRV string
	var since time.Time
	err := pollCtx(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		d, err := s.f.Client.AppsV1().Deployments(s.ns["main"]).Get(ctx, "recreate", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.Replicas != 0 || st.UpdatedReplicas != 0 || ptr(st.TerminatingReplicas) != fmt.Sprint(terminating) {
			lastRV = ""
			return false, nil
		}
		if d.ResourceVersion != lastRV {
			lastRV, since = d.ResourceVersion, time.Now()
			return false, nil
		}
		return time.Since(since) >= 2*time.Second, nil
	})
	if err != nil {
		return fmt.Errorf("the Recreate Deployment with %d old pods terminating: %w", terminating, err)
	}
	return nil
}

// rsKey names a ReplicaSet independently of its hash: its owner and image (a ReplicaSet
// without an owner by its own name).
func rsKey(rs *appsv1.ReplicaSet) string {
	ref := metav1.GetControllerOf(rs)
	if ref == nil {
		return "ReplicaSet:" + rs.Name
	}
	owner := ref.Kind + ":" + ref.Name
	image := ""
	if cs := rs.Spec.Template.Spec.Containers; len(cs) > 0 {
		image = cs[0].Image
	}
	return owner + "@" + image
}

// appsSnapshot reads and normalises the side's Deployments, ReplicaSets, pods and events,
// and says whether the current step is done.
func appsSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	rsByUID := map[string]string{}
	var rsNames []string
	type listed struct {
		ns   string
		deps []appsv1.Deployment
		rss  []appsv1.ReplicaSet
		rcs  []corev1.ReplicationController
		pods []corev1.Pod
		evs  []corev1.Event
	}
	var all []listed
	for logical, ns := range s.ns {
		l := listed{ns: logical}
		deps, err := s.f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		rss, err := s.f.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		rcs, err := s.f.Client.CoreV1().ReplicationControllers(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return view{}, err
		}
		l.rcs = rcs.Items
		for i := range l.rcs {
			rsByUID[string(l.rcs[i].UID)] = logical + "/ReplicationController:" + l.rcs[i].Name
			rsNames = append(rsNames, l.rcs[i].Name)
		}
		if l.pods, l.evs, err = s.podsAndEvents(ctx, ns); err != nil {
			return view{}, err
		}
		l.deps, l.rss = deps.Items, rss.Items
		for i := range l.rss {
			rsByUID[string(l.rss[i].UID)] = logical + "/" + rsKey(&l.rss[i])
			rsNames = append(rsNames, l.rss[i].Name)
		}
		all = append(all, l)
	}
	norm := newNormaliser(s, rsNames, nil)
	var events eventSet
	for _, l := range all {
		for i := range l.deps {
			d := &l.deps[i]
			p := "Deployment " + l.ns + "/" + d.Name
			putDeployment(out, p, d, norm)
			switch {
			case d.Status.ObservedGeneration < d.Generation:
				pending = append(pending, p+": generation not observed")
			case d.Spec.Paused:
			case l.ns == "quota":
				if !hasCondition(d.Status.Conditions, string(appsv1.DeploymentReplicaFailure)) {
					pending = append(pending, p+": no ReplicaFailure condition yet")
				}
			default:
				if err := framework.DeploymentComplete(d); err != nil {
					pending = append(pending, err.Error())
				}
			}
		}
		for i := range l.rss {
			rs := &l.rss[i]
			p := "ReplicaSet " + l.ns + "/" + rsKey(rs)
			putReplicaSet(out, p, rs, norm)
			want := int32(1)
			if rs.Spec.Replicas != nil {
				want = *rs.Spec.Replicas
			}
			if rs.Status.ObservedGeneration < rs.Generation || (l.ns != "quota" && (rs.Status.Replicas != want || rs.Status.AvailableReplicas != want)) {
				pending = append(pending, fmt.Sprintf("%s: %d/%d replicas available, generation %d observed %d", p, rs.Status.AvailableReplicas, want, rs.Generation, rs.Status.ObservedGeneration))
			}
		}
		for i := range l.rcs {
			rc := &l.rcs[i]
			p := "ReplicationController " + l.ns + "/" + rc.Name
			putReplicationController(out, p, rc, norm)
			pending = append(pending, rcPending(p, l.ns, rc)...)
		}
		counts := map[string]int{}
		for i := range l.pods {
			pod := &l.pods[i]
			if pod.DeletionTimestamp != nil {
				pending = append(pending, "pod "+pod.Name+" terminating")
				continue
			}
			owner := l.ns + "/<no controller>"
			if ref := metav1.GetControllerOf(pod); ref != nil {
				owner = rsByUID[string(ref.UID)]
			}
			counts[owner]++
		}
		for owner, n := range counts {
			out["Pods of "+owner] = fmt.Sprint(n)
		}
		for i := range l.evs {
			ev := &l.evs[i]
			kind := ev.InvolvedObject.Kind
			if kind != "Deployment" && kind != "ReplicaSet" && kind != "ReplicationController" {
				continue
			}
			object := l.ns + "/" + kind + " " + ev.InvolvedObject.Name
			if kind == "ReplicaSet" {
				if key, ok := rsByUID[string(ev.InvolvedObject.UID)]; ok {
					object = "ReplicaSet " + key
				} else {
					object += " (deleted)"
				}
			}
			events.add(object, ev, norm.text)
		}
	}
	events.put(out)
	return view{values: out, pending: pending, events: events.lines}, nil
}

func hasCondition(cs []appsv1.DeploymentCondition, typ string) bool {
	for _, c := range cs {
		if string(c.Type) == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func putDeployment(out flat, p string, d *appsv1.Deployment, n normaliser) {
	putMap(out, p+" annotation ", d.Annotations, n)
	out[p+" generation"] = fmt.Sprint(d.Generation)
	s := d.Status
	out[p+" status"] = fmt.Sprintf("observedGeneration=%d replicas=%d updated=%d ready=%d available=%d unavailable=%d terminating=%s collisionCount=%s",
		s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas, ptr(s.TerminatingReplicas), ptr(s.CollisionCount))
	for _, c := range s.Conditions {
		out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
	}
}

func putReplicaSet(out flat, p string, rs *appsv1.ReplicaSet, n normaliser) {
	out[p+" name"] = rs.Name
	putMap(out, p+" label ", rs.Labels, n)
	putMap(out, p+" annotation ", rs.Annotations, n)
	putOwners(out, p, rs.OwnerReferences, n.text)
	s := rs.Status
	out[p+" spec.replicas"] = ptr(rs.Spec.Replicas)
	out[p+" status"] = fmt.Sprintf("replicas=%d fullyLabeled=%d ready=%d available=%d terminating=%s observedCurrent=%v",
		s.Replicas, s.FullyLabeledReplicas, s.ReadyReplicas, s.AvailableReplicas, ptr(s.TerminatingReplicas), s.ObservedGeneration >= rs.Generation)
	for _, c := range s.Conditions {
		out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
	}
}
