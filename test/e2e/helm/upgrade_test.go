package helm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditcontroller "github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

// auditImages builds two images of the shard with the test-only kshard-audit controller
// (test/cmd/audit-shard) and the coordinator with hack/image.sh, tagged -audit-1 and
// -audit-2 (the same binaries: an upgrade between them rolls both Deployments), and
// imports them into the node. It returns the two tags.
func auditImages(t *testing.T, version string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	root := framework.RepoRoot()
	var tags []string
	for i := 1; i <= 2; i++ {
		tag := fmt.Sprintf("%s-audit-%d", version, i)
		build := exec.Command(filepath.Join(root, "hack", "image.sh"), "build")
		build.Dir = root
		build.Env = append(os.Environ(), "KSHARD_IMAGE_SHARD_PACKAGE=./test/cmd/audit-shard", "KSHARD_IMAGE_TAG="+tag, "KSHARD_IMAGE_OUT="+dir)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("hack/image.sh build of %s: %v\n%s", tag, err, out)
		}
		tarballs, err := filepath.Glob(filepath.Join(dir, "kshard-"+tag+"-linux-*.tar"))
		if err != nil || len(tarballs) != 1 {
			t.Fatalf("hack/image.sh build of %s wrote %v (%v), want one tarball", tag, tarballs, err)
		}
		if out, err := exec.Command(filepath.Join(root, "hack", "node.sh"), "import", tarballs[0]).CombinedOutput(); err != nil {
			t.Fatalf("importing %s into the node: %v\n%s", tag, err, out)
		}
		tags = append(tags, tag)
	}
	return tags[0], tags[1]
}

// shardValues are the shards' values from step 5 on. They switch the kshard-audit
// controller on (a later --controllers than the chart's, which knows only production
// controllers), each shard pod appending its records to a file of its own in dir, a folder
// of the node mounted through the chart's shard.extraVolumes: the records of replaced pods
// outlive them (the kubelet removes a deleted pod's logs). And they shorten the quota
// controller's full recalculation from 5 minutes to 10 s, so that step 6's half minute of
// load shows its queue on the dashboards as hours of a real cluster would.
func shardValues(dir string) []string {
	return []string{
		"--set-json", `shard.extraArgs=["--controllers=*,kshard-audit","--audit-log-file=/audit/$(POD_NAME).jsonl","--audit-resync-interval=200ms","--audit-work-duration=20ms","--resource-quota-sync-period=10s"]`,
		"--set-json", fmt.Sprintf(`shard.extraVolumes=[{"name":"audit","hostPath":{"path":%q,"type":"Directory"}}]`, dir),
		"--set-json", `shard.extraVolumeMounts=[{"name":"audit","mountPath":"/audit"}]`,
	}
}

// auditDir makes the node's folder for the audit records, writable by the shards' user.
func auditDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(nodeDir(), "audit")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// failoverAndUpgrade: the coordinator leader's pod deleted, the other replica leads with
// no partition moved and no shard fenced; then helm upgrade to a new image tag rolls both
// Deployments with no two shards ever reconciling one namespace at the same time (the
// kshard-audit controller's records, test/audit).
func (e *e2e) failoverAndUpgrade(t *testing.T) {
	ctx := context.Background()
	// The shards run the audit controller from here on: an upgrade to its first image.
	first, second := auditImages(t, e.version)
	dir := auditDir(t)
	e.upgrade(t, append([]string{"--set", "image.tag=" + first}, shardValues(dir)...))
	auditNamespaces := e.workload[:10]
	for _, ns := range auditNamespaces {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "audited", Labels: map[string]string{auditcontroller.Label: "true"}}}
		if _, err := e.f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := e.waitOwned(t, 3, 3*time.Minute) // helm upgrade sets the chart's 3 replicas again

	// Coordinator failover.
	leader := e.leader(t)
	if err := e.f.Client.CoreV1().Pods(namespace).Delete(ctx, leader.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The takeover is the Lease changing hands (the deleted leader releases it as it
	// stops); the pod that took it is Ready by Kubernetes only after its probe's period.
	var holder string
	framework.Eventually(t, 90*time.Second, "another coordinator holds the Lease", func(ctx context.Context) (bool, error) {
		l, err := e.f.Client.CoordinationV1().Leases(namespace).Get(ctx, "kshard-coordinator", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, err
		}
		holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "@")
		return holder != "" && holder != leader.Name, nil
	})
	tookOver := time.Since(start)
	next := e.leader(t)
	if next.Name != holder {
		t.Fatalf("%s holds the Lease but %s answers as the leader", holder, next.Name)
	}
	readyLeader := time.Since(start)
	// A new leader reports its assignments converged only after its grace period (session
	// TTL + margin), in which it grants nothing and the shards keep what they own.
	after := e.waitOwned(t, 3, 2*time.Minute)
	t.Logf("deleted the leader %s; %s took the Lease after %s, was a Ready pod leading after %s, its assignments converged after %s",
		leader.Name, next.Name, tookOver.Round(100*time.Millisecond), readyLeader.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	if moved := movedPartitions(before, after); moved != 0 {
		t.Fatalf("the failover moved %d partitions (before %s, after %s)", moved, shardSummary(before), shardSummary(after))
	}
	code, body, err := podGet(ctx, next, httpPort, "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("the new leader's /metrics: %d %v", code, err)
	}
	if n := framework.ParseMetrics(string(body)).Value("kshard_coordinator_moves_started_total"); n != 0 {
		t.Fatalf("the new leader started %v moves", n)
	}
	for _, s := range after.Shards {
		if s.Fenced {
			t.Fatalf("shard %s fenced after the failover", s.Shard)
		}
	}
	t.Logf("no partition moved, no shard fenced: %s", shardSummary(after))

	// helm upgrade to a new image tag.
	upgradeStart := time.Now()
	e.upgrade(t, append([]string{"--set", "image.tag=" + second}, shardValues(dir)...))
	e.waitOwned(t, 3, 3*time.Minute)
	for _, component := range []string{"coordinator", "shard"} {
		for _, p := range e.pods(t, component) {
			if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+second) {
				t.Fatalf("pod %s runs %s after the upgrade, want tag %s", p.Name, img, second)
			}
		}
	}
	recs, err := audit.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var during int
	for _, r := range recs {
		if r.Start >= upgradeStart.UnixNano() {
			during++
		}
	}
	if during == 0 {
		t.Fatalf("no kshard-audit record during the upgrade (%d in all): the audit shows nothing", len(recs))
	}
	if o := audit.Overlaps(recs); len(o) > 0 {
		t.Fatalf("%d overlapping reconciles, e.g. %s", len(o), o[0])
	}
	t.Logf("helm upgrade to %s rolled both Deployments in %s; %d audited reconciles by %d shard pods (%d during the upgrade) in %d namespaces, 0 overlapping",
		second, time.Since(upgradeStart).Round(time.Second), len(recs), len(files), during, len(auditNamespaces))
}

// movedPartitions counts the partitions whose owner differs between two answers.
func movedPartitions(a, b coordinatorrpc.Assignments) int {
	before, after := framework.Owners(a), framework.Owners(b)
	moved := 0
	for p, s := range before {
		if after[p] != s {
			moved++
		}
	}
	return moved + max(0, len(after)-len(before))
}
