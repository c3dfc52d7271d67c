package largecluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"

	"github.com/kshard/kshard/test/framework"
)

// mode is the controller set a run measures, chosen with KSHARD_BENCH_CONTROLLERS.
type mode struct {
	key string
	// controllers is the --controllers list of both sides (names kube-controller-manager
	// 1.37 and the shard both take).
	controllers []string
	// workerArgs are kube-controller-manager's default worker counts, given to both sides.
	workerArgs []string
	// queues are the work queues "queues empty" waits for; nil: every queue.
	queues []string
	// upstreamReady tells when kube-controller-manager's controllers can work (start to
	// Ready).
	upstreamReady func(ctx context.Context, k *framework.KCM) (bool, error)
	// firstLabels name the two first-change figures.
	firstLabels [2]string
	gcQuota     bool
}

var modes = []mode{
	{
		key: "deployment,replicaset", controllers: []string{"deployment", "replicaset"},
		workerArgs: []string{"--concurrent-deployment-syncs=" + workers, "--concurrent-replicaset-syncs=" + workers},
		queues:     []string{"deployment", "replicaset"}, upstreamReady: firstItemWorked,
		firstLabels: [2]string{"RS", "observed"},
	},
	{
		key: "garbagecollector,resourcequota", controllers: []string{"garbage-collector-controller", "resourcequota-controller"},
		workerArgs:    []string{"--concurrent-gc-syncs=20", "--concurrent-resource-quota-syncs=5"},
		upstreamReady: gcQuotaReady, firstLabels: [2]string{"quota replenished", "dependent collected"}, gcQuota: true,
	},
}

// benchMode is the measured controller set: KSHARD_BENCH_CONTROLLERS, in any order.
var benchMode = pickMode(framework.EnvList("KSHARD_BENCH_CONTROLLERS", modes[0].key))

func pickMode(want []string) mode {
	slices.Sort(want)
	for _, m := range modes {
		have := strings.Split(m.key, ",")
		slices.Sort(have)
		if slices.Equal(have, want) {
			return m
		}
	}
	panic(fmt.Sprintf("KSHARD_BENCH_CONTROLLERS=%s: want one of deployment,replicaset or garbagecollector,resourcequota", strings.Join(want, ",")))
}

// firstItemWorked: the Deployment and ReplicaSet controllers' workers finished their first
// item (see doc.go).
func firstItemWorked(ctx context.Context, k *framework.KCM) (bool, error) {
	m, err := k.Metrics(ctx)
	if err != nil {
		return false, err
	}
	return m.Value("workqueue_work_duration_seconds_count", `name="deployment"`) > 0 &&
		m.Value("workqueue_work_duration_seconds_count", `name="replicaset"`) > 0, nil
}

// gcSynced is what kube-controller-manager's garbage collector logs once every resource's
// monitor has synced, right before it starts its workers.
const gcSynced = "all resource monitors have synced"

// gcQuotaReady: the garbage collector's monitors have all synced (its log line, as no
// metric tells) and the ResourceQuota controller's workers, started once its informers and
// its monitors of every counted resource synced, finished their first quota.
func gcQuotaReady(ctx context.Context, k *framework.KCM) (bool, error) {
	m, err := k.Metrics(ctx)
	if err != nil {
		return false, err
	}
	if m.Value("workqueue_work_duration_seconds_count", `name="resourcequota_primary"`) == 0 {
		return false, nil
	}
	log, err := os.ReadFile(k.LogPath)
	if err != nil {
		return false, err
	}
	return bytes.Contains(log, []byte(gcSynced)), nil
}

// The fixture's additions for the garbage collector and ResourceQuota.
var (
	configMapsPerNS = framework.EnvInt("KSHARD_BENCH_CONFIGMAPS_PER_NS", 3)
	secretsPerNS    = framework.EnvInt("KSHARD_BENCH_SECRETS_PER_NS", 3)
	deletions       = framework.EnvInt("KSHARD_BENCH_DELETIONS", 20)
	// restoreEach restores the fixture after every run (KSHARD_BENCH_RESTORE=1, the
	// default); with 0 it is restored only when the benchmark starts, and the deletions and
	// replacements of later runs pick namespaces earlier runs left alone.
	restoreEach = os.Getenv("KSHARD_BENCH_RESTORE") != "0"
)

// intactNS picks a random namespace whose Deployment no run has deleted or replaced since
// the fixture was last restored, and marks it depleted.
func (bn *bench) intactNS() string {
	for {
		ns := nsName(bn.rng.Intn(namespaces))
		if !bn.depleted[ns] || len(bn.depleted) >= namespaces {
			bn.depleted[ns] = true
			return ns
		}
	}
}

const (
	quotaName = "quota"
	// churnLabel marks the ConfigMaps the runs make and the garbage collector removes.
	churnLabel      = "kshard.io/bench-churn"
	churnDependents = 2
	// ownerLife is how long a churn owner lives before it is deleted.
	ownerLife = 10 * time.Second
	// replaceEvery: every replaceEvery-th churn step replaces a Deployment instead.
	replaceEvery = 10
)

// quotaHard is every fixture namespace's ResourceQuota: object counts only, as the
// fixture's pods request no CPU or memory (a requests.cpu quota would refuse them).
func quotaHard() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourcePods:      resource.MustParse("50"),
		"count/configmaps":       resource.MustParse("100"),
		"count/secrets":          resource.MustParse("50"),
		"count/deployments.apps": resource.MustParse("10"),
		"count/replicasets.apps": resource.MustParse("50"),
	}
}

// populateGCQuota creates what is missing of every namespace's ConfigMaps, Secrets and
// ResourceQuota.
func (bn *bench) populateGCQuota(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	core := bn.client.CoreV1()
	cms := bn.fixtureKeys(b, "configmaps")
	secrets := bn.fixtureKeys(b, "secrets")
	quotas := bn.fixtureKeys(b, "resourcequotas")
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{fixtureLabel: "fixture"}}
	}
	var create []func() error
	for i := 0; i < namespaces; i++ {
		ns := nsName(i)
		for j := 0; j < configMapsPerNS; j++ {
			if m := meta(ns, fmt.Sprintf("config-%d", j)); !cms[ns+"/"+m.Name] {
				create = append(create, func() error {
					_, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: m, Data: map[string]string{"key": strings.Repeat("v", 256)}}, metav1.CreateOptions{})
					return err
				})
			}
		}
		for j := 0; j < secretsPerNS; j++ {
			if m := meta(ns, fmt.Sprintf("secret-%d", j)); !secrets[ns+"/"+m.Name] {
				create = append(create, func() error {
					_, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: m, StringData: map[string]string{"key": strings.Repeat("s", 256)}}, metav1.CreateOptions{})
					return err
				})
			}
		}
		if m := meta(ns, quotaName); !quotas[ns+"/"+m.Name] {
			create = append(create, func() error {
				_, err := core.ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: m, Spec: corev1.ResourceQuotaSpec{Hard: quotaHard()}}, metav1.CreateOptions{})
				return err
			})
		}
	}
	parallel(b, len(create), func(i int) error {
		if err := create[i](); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	b.Logf("fixture: %d ConfigMaps, Secrets and ResourceQuotas created (%s)", len(create), time.Since(start).Round(time.Second))
}

// fixtureKeys lists the fixture's objects of one core resource (metadata only, in pages)
// as namespace/name.
func (bn *bench) fixtureKeys(b *testing.B, resource string) map[string]bool {
	b.Helper()
	mc, err := metadata.NewForConfig(bn.f.Config)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]bool{}
	eachFixtureObject(b, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return mc.Resource(corev1.SchemeGroupVersion.WithResource(resource)).List(ctx, opts)
	}, func(o runtime.Object) {
		m := o.(*metav1.PartialObjectMetadata)
		out[m.Namespace+"/"+m.Name] = true
	})
	return out
}

func (bn *bench) listQuotas(b *testing.B) []corev1.ResourceQuota {
	b.Helper()
	return listFixture[corev1.ResourceQuota](b, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return bn.client.CoreV1().ResourceQuotas(metav1.NamespaceAll).List(ctx, opts)
	})
}

// quotasBehind counts the fixture's quotas whose status does not yet show their spec and
// the fixture's pods, and gives one reason.
func (bn *bench) quotasBehind(b *testing.B) (int, error) {
	qs := bn.listQuotas(b)
	n := 0
	var example error
	wantPods := int64(int(replicas) * deploymentsPerNS)
	for _, q := range qs {
		var err error
		for k, v := range q.Spec.Hard {
			if s, ok := q.Status.Hard[k]; !ok || s.Cmp(v) != 0 {
				err = fmt.Errorf("%s/%s: status.hard[%s] not %s", q.Namespace, q.Name, k, v.String())
				break
			}
		}
		if used := q.Status.Used[corev1.ResourcePods]; err == nil && used.Value() != wantPods {
			err = fmt.Errorf("%s/%s: status.used.pods %s, want %d", q.Namespace, q.Name, used.String(), wantPods)
		}
		if err != nil {
			n++
			if example == nil {
				example = err
			}
		}
	}
	if len(qs) < namespaces {
		n += namespaces - len(qs)
		example = fmt.Errorf("%d of %d quotas exist", len(qs), namespaces)
	}
	return n, example
}

// churnConfigMap is a ConfigMap of the churn, owned by owner when it is set.
func churnConfigMap(name string, owner *corev1.ConfigMap) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{churnLabel: "churn"}},
		Data: map[string]string{"key": "value"}}
	if owner != nil {
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
	}
	return cm
}

func usedConfigMaps(q *corev1.ResourceQuota) int64 {
	u := q.Status.Used["count/configmaps"]
	return u.Value()
}

var background = metav1.DeletePropagationBackground

// firstGCQuotaChange, right after Ready: in a random namespace, a ConfigMap owner and one
// dependent are made, then the owner deleted. It times until the namespace's quota counts
// one ConfigMap fewer (the ResourceQuota controller's replenishment: admission counts
// creations itself, only the controller counts deletions) and until the garbage collector
// has deleted the dependent.
func (bn *bench) firstGCQuotaChange(b *testing.B) (string, time.Duration, time.Duration) {
	b.Helper()
	ctx := context.Background()
	ns := nsName(bn.rng.Intn(namespaces))
	cms := bn.client.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, churnConfigMap("first-owner", nil), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cms.Create(ctx, churnConfigMap("first-dependent", owner), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	q, err := bn.client.CoreV1().ResourceQuotas(ns).Get(ctx, quotaName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	before := usedConfigMaps(q)
	start := time.Now()
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		b.Fatal(err)
	}
	var quotaAfter, gcAfter time.Duration
	deadline := start.Add(convergeLimit)
	for quotaAfter == 0 || gcAfter == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("first change in %s not acted on after %s (quota after %s, collected after %s)", ns, convergeLimit, quotaAfter, gcAfter)
		}
		if quotaAfter == 0 {
			if q, err := bn.client.CoreV1().ResourceQuotas(ns).Get(ctx, quotaName, metav1.GetOptions{}); err == nil && usedConfigMaps(q) < before {
				quotaAfter = time.Since(start)
			}
		}
		if gcAfter == 0 {
			if _, err := cms.Get(ctx, "first-dependent", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				gcAfter = time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ns, quotaAfter, gcAfter
}

// deletionLatency deletes the Deployment of `deletions` random namespaces (background
// propagation, all at once) and times, for each, until its last pod is gone (polled every
// 100 ms; the garbage collector deletes the ReplicaSet, then its pods). The Deployments
// are created again afterwards; their pods come back when the fixture is restored.
func (bn *bench) deletionLatency(b *testing.B) []time.Duration {
	b.Helper()
	ctx := context.Background()
	type target struct {
		ns    string
		start time.Time
		gone  time.Duration
	}
	var ts []*target
	for range min(deletions, namespaces/2) {
		t := &target{ns: bn.intactNS(), start: time.Now()}
		if err := bn.client.AppsV1().Deployments(t.ns).Delete(ctx, deployName(0), metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			b.Fatal(err)
		}
		ts = append(ts, t)
	}
	deadline := time.Now().Add(convergeLimit)
	for left := len(ts); left > 0; {
		for _, t := range ts {
			if t.gone != 0 {
				continue
			}
			pods, err := bn.client.CoreV1().Pods(t.ns).List(ctx, metav1.ListOptions{LabelSelector: framework.RolloutApp + "=" + deployName(0)})
			if err == nil && len(pods.Items) == 0 {
				t.gone = time.Since(t.start)
				left--
			}
		}
		if left > 0 && time.Now().After(deadline) {
			b.Fatalf("%d deleted Deployments still have pods after %s", left, convergeLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var out []time.Duration
	for _, t := range ts {
		out = append(out, t.gone)
		if err := bn.createDeployment(ctx, t.ns, deployName(0)); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

func durationsSeconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// gcQuotaChurn is the garbage collector's and ResourceQuota's churn: each step makes a
// ConfigMap owner with churnDependents dependents in a random namespace and deletes
// (background propagation) the owners older than ownerLife, so the garbage collector
// deletes their dependents and the quotas count up and down; every replaceEvery-th step
// instead deletes a random namespace's Deployment (background) and creates it again, so
// the garbage collector deletes the old one's ReplicaSet and pods (no Deployment
// controller runs: the new one stays without pods until the fixture is restored).
type gcQuotaChurn struct {
	bn       *bench
	b        *testing.B
	n        int
	owners   []churnOwner
	replaced map[string]bool
}

type churnOwner struct {
	ns, name string
	at       time.Time
}

func (bn *bench) newGCQuotaChurn(b *testing.B) *gcQuotaChurn {
	return &gcQuotaChurn{bn: bn, b: b, replaced: map[string]bool{}}
}

func (c *gcQuotaChurn) deleteOwner(ctx context.Context, o churnOwner) bool {
	err := c.bn.client.CoreV1().ConfigMaps(o.ns).Delete(ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil && !apierrors.IsNotFound(err) {
		c.b.Logf("churn: deleting %s/%s: %v", o.ns, o.name, err)
		return false
	}
	return true
}

func (c *gcQuotaChurn) step(ctx context.Context) bool {
	c.n++
	ok := true
	for len(c.owners) > 0 && time.Since(c.owners[0].at) >= ownerLife {
		ok = c.deleteOwner(ctx, c.owners[0]) && ok
		c.owners = c.owners[1:]
	}
	if c.n%replaceEvery == 0 {
		ns := c.bn.intactNS()
		err := c.bn.client.AppsV1().Deployments(ns).Delete(ctx, deployName(0), metav1.DeleteOptions{PropagationPolicy: &background})
		if err == nil || apierrors.IsNotFound(err) {
			err = c.bn.createDeployment(ctx, ns, deployName(0))
		}
		if err != nil {
			c.b.Logf("churn: replacing %s/%s: %v", ns, deployName(0), err)
			return false
		}
		c.replaced[ns] = true
		return ok
	}
	ns := nsName(c.bn.rng.Intn(namespaces))
	cms := c.bn.client.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, churnConfigMap(fmt.Sprintf("churn-owner-%d", c.n), nil), metav1.CreateOptions{})
	if err != nil {
		c.b.Logf("churn: %s: %v", ns, err)
		return false
	}
	c.owners = append(c.owners, churnOwner{ns: ns, name: owner.Name, at: time.Now()})
	for j := 0; j < churnDependents; j++ {
		if _, err := cms.Create(ctx, churnConfigMap(fmt.Sprintf("churn-%d-%d", c.n, j), owner), metav1.CreateOptions{}); err != nil {
			c.b.Logf("churn: %s: %v", ns, err)
			ok = false
		}
	}
	return ok
}

// finish deletes the owners left and returns how long after the churn's end every churn
// ConfigMap and every replaced Deployment's ReplicaSets and pods were gone.
func (c *gcQuotaChurn) finish(b *testing.B) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for _, o := range c.owners {
		c.deleteOwner(ctx, o)
	}
	c.owners = nil
	core, apps := c.bn.client.CoreV1(), c.bn.client.AppsV1()
	deadline := start.Add(convergeLimit)
	for {
		left := ""
		l, err := core.ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: churnLabel, Limit: 1})
		switch {
		case err != nil:
			left = err.Error()
		case len(l.Items) > 0:
			left = "ConfigMap " + l.Items[0].Namespace + "/" + l.Items[0].Name
		}
		for ns := range c.replaced {
			if left != "" {
				break
			}
			rss, err1 := apps.ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			pods, err2 := core.Pods(ns).List(ctx, metav1.ListOptions{})
			switch {
			case err1 != nil || err2 != nil:
				left = fmt.Sprint(err1, err2)
			case len(rss.Items)+len(pods.Items) > 0:
				left = fmt.Sprintf("%s: %d ReplicaSets, %d pods", ns, len(rss.Items), len(pods.Items))
			}
		}
		if left == "" {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("churn not collected %s after its end: %s left", convergeLimit, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
