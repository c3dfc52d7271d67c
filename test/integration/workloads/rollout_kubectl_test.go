package workloads

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	changeCause = "kubernetes.io/change-cause"
	image2      = "registry.k8s.io/pause:3.9"
)

// lines splits output into its non-empty lines, right-trimmed.
func lines(out string) []string {
	var l []string
	for _, s := range strings.Split(out, "\n") {
		if s = strings.TrimRight(s, " \t"); s != "" {
			l = append(l, s)
		}
	}
	return l
}

func TestKubectlRolloutStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createDeployment(newDeployment("web", 2))
	out := e.mustKubectl("rollout", "status", "deployment/web", "--timeout=90s")
	l := lines(out)
	if len(l) == 0 || l[len(l)-1] != `deployment "web" successfully rolled out` {
		t.Fatalf("rollout status printed %q; want it to end with the success line", out)
	}
	for _, s := range l[:len(l)-1] {
		if !waitingLine(s, "web") {
			t.Errorf("unexpected line %q", s)
		}
	}
	// Once complete, rollout status answers at once, with only the success line.
	if l := lines(e.mustKubectl("rollout", "status", "deployment/web", "--timeout=10s")); len(l) != 1 {
		t.Errorf("rollout status of a complete deployment printed %q", l)
	}
}

func TestKubectlRolloutStatusDeadlineExceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("stuck", 1, unschedulable)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](5)
	e.createDeployment(d)
	start := time.Now()
	out, stderr, err := e.kubectl("rollout", "status", "deployment/stuck", "--timeout=90s")
	if err == nil {
		t.Fatalf("rollout status of a stuck deployment succeeded: %q", out)
	}
	if !strings.Contains(stderr, `error: deployment "stuck" exceeded its progress deadline`) {
		t.Fatalf("rollout status failed with %q, want the progress deadline error", stderr)
	}
	if el := time.Since(start); el > 60*time.Second {
		t.Errorf("rollout status took %s to report the deadline of 5s", el)
	}
	for _, s := range lines(out) {
		if !waitingLine(s, "stuck") {
			t.Errorf("unexpected line %q", s)
		}
	}
}

// waitingLine reports whether s is one of the progress lines rollout status prints
// while it waits.
func waitingLine(s, name string) bool {
	return s == "Waiting for deployment spec update to be observed..." ||
		strings.HasPrefix(s, `Waiting for deployment "`+name+`" rollout to finish: `)
}

// undo goes back to the previous template, reusing its ReplicaSet at a new revision;
// --to-revision picks one; an unknown revision is an error.
func TestKubectlRolloutUndo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createDeployment(newDeployment("undo", 2))
	e.mustKubectl("rollout", "status", "deployment/undo", "--timeout=90s")
	first := e.newRSOfName("undo")
	e.mustKubectl("set", "image", "deployment/undo", "app="+image2)
	e.mustKubectl("rollout", "status", "deployment/undo", "--timeout=90s")
	second := e.newRSOfName("undo")
	if second.Name == first.Name {
		t.Fatalf("set image did not make a new replicaset")
	}

	if out := lines(e.mustKubectl("rollout", "undo", "deployment/undo")); len(out) != 1 || out[0] != "deployment.apps/undo rolled back" {
		t.Fatalf("rollout undo printed %q", out)
	}
	e.mustKubectl("rollout", "status", "deployment/undo", "--timeout=90s")
	d := e.waitComplete("undo", 60*time.Second)
	rs := e.newRSOfName("undo")
	if img := d.Spec.Template.Spec.Containers[0].Image; img != image || rs.Name != first.Name || d.Annotations[revisionAnnotation] != "3" ||
		rs.Annotations[revisionAnnotation] != "3" || rs.Annotations[revisionHistoryAnnotation] != "1" {
		t.Fatalf("after undo: image %s, revision %q, current replicaset %s (revision %q, history %q); want %s, 3, %s (3, 1)",
			img, d.Annotations[revisionAnnotation], rs.Name, rs.Annotations[revisionAnnotation], rs.Annotations[revisionHistoryAnnotation], image, first.Name)
	}

	if out := lines(e.mustKubectl("rollout", "undo", "deployment/undo", "--to-revision=2")); len(out) != 1 || out[0] != "deployment.apps/undo rolled back" {
		t.Fatalf("rollout undo --to-revision=2 printed %q", out)
	}
	e.mustKubectl("rollout", "status", "deployment/undo", "--timeout=90s")
	d = e.waitComplete("undo", 60*time.Second)
	rs = e.newRSOfName("undo")
	if img := d.Spec.Template.Spec.Containers[0].Image; img != image2 || rs.Name != second.Name || d.Annotations[revisionAnnotation] != "4" || rs.Annotations[revisionHistoryAnnotation] != "2" {
		t.Fatalf("after undo --to-revision=2: image %s, revision %q, current replicaset %s (history %q); want %s, 4, %s (2)",
			img, d.Annotations[revisionAnnotation], rs.Name, rs.Annotations[revisionHistoryAnnotation], image2, second.Name)
	}
	rss, err := e.replicaSetsOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(rss) != 2 {
		t.Fatalf("replicasets %s, want the two templates' only", describeRSs(rss))
	}

	_, stderr, err := e.kubectl("rollout", "undo", "deployment/undo", "--to-revision=9")
	if err == nil || !strings.Contains(stderr, "unable to find specified revision 9 in history") {
		t.Fatalf("rollout undo --to-revision=9: err %v, stderr %q; want the unknown revision error", err, stderr)
	}
}

func (e *env) newRSOfName(name string) *appsv1.ReplicaSet {
	e.t.Helper()
	var rs *appsv1.ReplicaSet
	e.eventually(30*time.Second, "the current replicaset of "+name, func(ctx context.Context) error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rs, err = e.newRSOf(ctx, d)
		return err
	})
	return rs
}

func TestKubectlRolloutPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.createDeployment(newDeployment("pause", 2))
	e.mustKubectl("rollout", "status", "deployment/pause", "--timeout=90s")
	if out := lines(e.mustKubectl("rollout", "pause", "deployment/pause")); len(out) != 1 || out[0] != "deployment.apps/pause paused" {
		t.Fatalf("rollout pause printed %q", out)
	}
	if !e.deployment("pause").Spec.Paused {
		t.Fatal("spec.paused not set by rollout pause")
	}
	e.mustKubectl("set", "image", "deployment/pause", "app="+image2)
	e.consistently(3*time.Second, "no rollout while paused", func(ctx context.Context) error {
		rss, err := e.replicaSetsOf(ctx, d)
		if err != nil {
			return err
		}
		if len(rss) != 1 {
			return fmt.Errorf("replicasets %s", describeRSs(rss))
		}
		return nil
	})
	if out := lines(e.mustKubectl("rollout", "resume", "deployment/pause")); len(out) != 1 || out[0] != "deployment.apps/pause resumed" {
		t.Fatalf("rollout resume printed %q", out)
	}
	e.mustKubectl("rollout", "status", "deployment/pause", "--timeout=90s")
	done := e.waitComplete("pause", 60*time.Second)
	if done.Annotations[revisionAnnotation] != "2" || done.Spec.Template.Spec.Containers[0].Image != image2 {
		t.Fatalf("after resume: revision %q image %s", done.Annotations[revisionAnnotation], done.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestKubectlRolloutRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createDeployment(newDeployment("restart", 2))
	e.mustKubectl("rollout", "status", "deployment/restart", "--timeout=90s")
	before := e.newRSOfName("restart")
	if out := lines(e.mustKubectl("rollout", "restart", "deployment/restart")); len(out) != 1 || out[0] != "deployment.apps/restart restarted" {
		t.Fatalf("rollout restart printed %q", out)
	}
	e.mustKubectl("rollout", "status", "deployment/restart", "--timeout=90s")
	d := e.waitComplete("restart", 60*time.Second)
	if d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
		t.Fatalf("template annotations %v lack restartedAt", d.Spec.Template.Annotations)
	}
	after := e.newRSOfName("restart")
	if after.Name == before.Name || d.Annotations[revisionAnnotation] != "2" {
		t.Fatalf("restart: replicaset %s -> %s, revision %q; want a new replicaset at revision 2", before.Name, after.Name, d.Annotations[revisionAnnotation])
	}
	act, _, err := e.ownedPods(e.ctx(), after.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(act) != 2 {
		t.Fatalf("restarted replicaset controls %v, want 2 pods", names(act))
	}
	if old := e.rs(before.Name); ptr.Deref(old.Spec.Replicas, -1) != 0 {
		t.Fatalf("old replicaset %s still at %d replicas", old.Name, ptr.Deref(old.Spec.Replicas, -1))
	}
}

// history lists each revision with the change-cause the controller copied from the
// Deployment to the ReplicaSet; --revision shows that revision's pod template.
func TestKubectlRolloutHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("hist", 1)
	d.Annotations = map[string]string{changeCause: "first"}
	e.createDeployment(d)
	e.mustKubectl("rollout", "status", "deployment/hist", "--timeout=90s")
	e.updateDeployment("hist", func(d *appsv1.Deployment) {
		d.Annotations[changeCause] = "second"
		d.Spec.Template.Spec.Containers[0].Image = image2
	})
	e.mustKubectl("rollout", "status", "deployment/hist", "--timeout=90s")

	out := lines(e.mustKubectl("rollout", "history", "deployment/hist"))
	row := regexp.MustCompile(`^(\d+)\s+(.*)$`)
	want := [][2]string{{"1", "first"}, {"2", "second"}}
	if len(out) != 2+len(want) || out[0] != "deployment.apps/hist" || strings.Join(strings.Fields(out[1]), " ") != "REVISION CHANGE-CAUSE" {
		t.Fatalf("rollout history printed %q", out)
	}
	for i, w := range want {
		m := row.FindStringSubmatch(out[2+i])
		if m == nil || m[1] != w[0] || m[2] != w[1] {
			t.Fatalf("rollout history row %d is %q, want revision %s with cause %q", i, out[2+i], w[0], w[1])
		}
	}

	rev := e.mustKubectl("rollout", "history", "deployment/hist", "--revision=2")
	rl := lines(rev)
	if len(rl) == 0 || rl[0] != "deployment.apps/hist with revision #2" {
		t.Fatalf("rollout history --revision=2 printed %q", rev)
	}
	field := func(name string) string {
		for _, l := range rl {
			if f, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
				return strings.TrimSpace(f)
			}
		}
		return ""
	}
	hash := e.newRSOfName("hist").Labels[hashLabel]
	for _, c := range []struct{ field, want string }{
		{"Labels", "app=hist"},
		{"Annotations", changeCause + ": second"},
		{"Image", image2},
	} {
		if got := field(c.field); got != c.want {
			t.Errorf("rollout history --revision=2: %s is %q, want %q\n%s", c.field, got, c.want, rev)
		}
	}
	if !strings.Contains(rev, hashLabel+"="+hash) {
		t.Errorf("rollout history --revision=2 does not show %s=%s:\n%s", hashLabel, hash, rev)
	}
	if _, stderr, err := e.kubectl("rollout", "history", "deployment/hist", "--revision=7"); err == nil || !strings.Contains(stderr, "unable to find the specified revision") {
		t.Errorf("rollout history --revision=7: err %v, stderr %q; want the unknown revision error", err, stderr)
	}
}
