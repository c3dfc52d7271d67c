package dashboards

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	// namespaces of load at the start: each has an audited ConfigMap and a Deployment.
	namespaces = 24
	// step of the range queries, like a Grafana panel a few hundred pixels wide over the
	// test's few minutes; $__interval is the step.
	step = 2 * time.Second
)

// rateInterval is Grafana's $__rate_interval: max($__interval + scrape interval,
// 4 × scrape interval).
func rateInterval() time.Duration {
	return max(step+scrapeInterval, 4*scrapeInterval)
}

// loadNamespace makes a namespace with an audited ConfigMap (the kshard-audit controller
// reconciles it every second), a one-replica Deployment (for the workload controllers), a
// one-replica ReplicationController (replicationcontroller),
// a one-pod Job with a TTL (job, and ttl-after-finished once kwok completes the pod), a
// CronJob (cronjob) and a ResourceQuota (resourcequota; collectAndCount gives it and the
// garbage collector work), so that every controller's panels have data.
func loadNamespace(t *testing.T, f *framework.Framework) (string, error) {
	ns := f.Namespace(t, nil).Name
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{audit.Label: "true"}}}
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating configmap in %s: %w", ns, err)
	}
	d := framework.NewRollingDeployment("web", 1, intstr.FromInt32(1), intstr.FromInt32(0), "registry.example/web:1.0", nil)
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating deployment in %s: %w", ns, err)
	}
	rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: corev1.ReplicationControllerSpec{
		Replicas: ptr.To[int32](1), Selector: map[string]string{"app": "legacy"},
		Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "legacy"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/legacy:1.0"}}}},
	}}
	if _, err := f.Client.CoreV1().ReplicationControllers(ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating replicationcontroller in %s: %w", ns, err)
	}
	pod := batchv1.JobSpec{
		TTLSecondsAfterFinished: ptr.To[int32](3600),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "work", Image: "registry.example/work:1.0"}}}},
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "objects"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("1000")}}}
	if _, err := f.Client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating resourcequota in %s: %w", ns, err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "once"}, Spec: pod}
	if _, err := f.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating job in %s: %w", ns, err)
	}
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "hourly"},
		Spec: batchv1.CronJobSpec{Schedule: "@hourly", JobTemplate: batchv1.JobTemplateSpec{Spec: pod}}}
	if _, err := f.Client.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{}); err != nil {
		return ns, fmt.Errorf("creating cronjob in %s: %w", ns, err)
	}
	return ns, nil
}

func createLoad(t *testing.T, f *framework.Framework, n int) []string {
	t.Helper()
	nss := make([]string, n)
	err := framework.Parallel(n, 8, func(i int) error {
		var err error
		nss[i], err = loadNamespace(t, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return nss
}

// loadEveryShard adds namespaces until every shard owns at least one of the test's, so the
// per-shard checks see each shard work; it returns the namespaces.
func loadEveryShard(t *testing.T, f *framework.Framework, k *framework.KShard, nss []string) []string {
	t.Helper()
	pmap, err := partition.NewMap(4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for len(nss) < 200 {
		l, err := k.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a, err := l.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners := framework.Owners(a)
		per := map[string]int{}
		for _, ns := range nss {
			per[owners[uint32(pmap.For(ns))]]++
		}
		idle := false
		for name := range k.Live() {
			idle = idle || per[name] == 0
		}
		if !idle {
			t.Logf("the test's namespaces per shard: %v", per)
			return nss
		}
		ns, err := loadNamespace(t, f)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	t.Fatal("200 namespaces and still a shard owns none of them")
	return nil
}

// rollOut changes every test Deployment's image and waits until each rollout is complete:
// API traffic, reconciles and queue activity on every shard after the scale-out.
func rollOut(t *testing.T, f *framework.Framework, nss []string, image string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"` + image + `"}]}}}}`)
	err := framework.Parallel(len(nss), 8, func(i int) error {
		_, err := f.Client.AppsV1().Deployments(nss[i]).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "every test Deployment rolled out to the new image", func(ctx context.Context) (bool, error) {
		for _, ns := range nss {
			d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if err := framework.DeploymentComplete(d); err != nil {
				return false, fmt.Errorf("%s: %w", ns, err)
			}
		}
		return true, nil
	})
}

// collectAndCount gives the garbage collector and ResourceQuota work in every test
// namespace, once per round: a ConfigMap owner deleted in the background (its dependent
// is collected: attempt to delete) and one deleted with orphan propagation (its
// dependent orphaned: attempt to orphan), and the namespace's quota's spec.hard changed
// (a full sync) while a counted ConfigMap deletion releases usage (replenishment). It
// waits until the dependents are collected and orphaned.
func collectAndCount(t *testing.T, f *framework.Framework, nss []string, round int) {
	t.Helper()
	ctx := context.Background()
	cms := f.Client.CoreV1().ConfigMaps
	owned := func(ns, name string, owner *corev1.ConfigMap) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		}
		_, err := cms(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	// Quota admission charges every create on the namespace's quota, racing the quota
	// controller's status writes: a create or patch can meet a conflict, which a client
	// retries (kubectl does), upstream's controllers as kshard's.
	conflict := func(op func() error) error { return retry.OnError(retry.DefaultRetry, apierrors.IsConflict, op) }
	err := framework.Parallel(len(nss), 8, func(i int) error {
		ns := nss[i]
		hard := fmt.Sprintf(`{"spec":{"hard":{"count/configmaps":"%d"}}}`, 1000+round)
		if err := conflict(func() error {
			_, err := f.Client.CoreV1().ResourceQuotas(ns).Patch(ctx, "objects", types.MergePatchType, []byte(hard), metav1.PatchOptions{})
			return err
		}); err != nil {
			return err
		}
		for _, kind := range []string{"gc", "orphan"} {
			var owner *corev1.ConfigMap
			if err := conflict(func() error {
				var err error
				owner, err = cms(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-owner-%d", kind, round)}}, metav1.CreateOptions{})
				return err
			}); err != nil {
				return err
			}
			if err := conflict(func() error { return owned(ns, fmt.Sprintf("%s-dependent-%d", kind, round), owner) }); err != nil {
				return err
			}
			policy := metav1.DeletePropagationBackground
			if kind == "orphan" {
				policy = metav1.DeletePropagationOrphan
			}
			if err := cms(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 90*time.Second, "every test dependent collected or orphaned", func(ctx context.Context) (bool, error) {
		for _, ns := range nss {
			if _, err := cms(ns).Get(ctx, fmt.Sprintf("gc-dependent-%d", round), metav1.GetOptions{}); err == nil {
				return false, fmt.Errorf("%s/gc-dependent-%d still there", ns, round)
			}
			cm, err := cms(ns).Get(ctx, fmt.Sprintf("orphan-dependent-%d", round), metav1.GetOptions{})
			if err != nil || len(cm.OwnerReferences) > 0 {
				return false, fmt.Errorf("%s/orphan-dependent-%d not orphaned (%v)", ns, round, err)
			}
		}
		return true, nil
	})
}

// waitScraped waits until Prometheus has scraped every target up and has seen the
// partition moves the scale-out caused.
func waitScraped(t *testing.T, p *prometheus, targets int) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "Prometheus scraped every target and the moves", func(ctx context.Context) (bool, error) {
		for expr, want := range map[string]float64{
			`sum(up)`: float64(targets),
			`sum(kshard_coordinator_moves_finished_total)`:  1,
			`count(kshard_controller_reconciles_total > 0)`: 1,
		} {
			r, err := p.query(ctx, expr, time.Now())
			if err != nil {
				return false, err
			}
			if len(r.Result) == 0 || len(r.Result[0].Value) != 2 {
				return false, fmt.Errorf("%s: no result", expr)
			}
			var got float64
			if _, err := fmt.Sscan(r.Result[0].Value[1].(string), &got); err != nil || got < want {
				return false, fmt.Errorf("%s = %v, want ≥ %v", expr, r.Result[0].Value[1], want)
			}
		}
		return true, nil
	})
}

// varValues is one way to fill a dashboard's variables: name → the text substituted.
type varValues map[string]string

// promRegexEscape escapes a label value for a =~ matcher inside a PromQL string, as
// Grafana does for multi-value variables.
func promRegexEscape(v string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
}

// substitute fills variables, Grafana's built-ins included, into expr.
func substitute(expr string, vals varValues) string {
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1]
		if name == "" {
			name = m[2]
		}
		if v, ok := vals[name]; ok {
			return v
		}
		return ref
	})
}

// resolvedVar is a query variable with the values its own query found.
type resolvedVar struct {
	variable
	values []string
}

// allText is what Grafana substitutes when "All" is selected.
func (v resolvedVar) allText() string {
	if v.AllValue != "" {
		return v.AllValue
	}
	esc := make([]string, len(v.values))
	for i, s := range v.values {
		esc[i] = promRegexEscape(s)
	}
	return "(" + strings.Join(esc, "|") + ")"
}

// combination is a named filling of the variables.
type combination struct {
	name string
	vals varValues
}

// combinations resolves the dashboard's variables through their own label_values queries
// (in order, each with the earlier ones at All) and returns: every variable at All, then
// each value of each variable alone with the others at All.
func combinations(ctx context.Context, p *prometheus, d *dashboard, builtins varValues, start, end time.Time) ([]combination, error) {
	all := varValues{}
	for k, v := range builtins {
		all[k] = v
	}
	var vars []resolvedVar
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.query()
		if err != nil {
			return nil, err
		}
		sel, label, err := parseLabelValues(q)
		if err != nil {
			return nil, err
		}
		vals, err := p.labelValues(ctx, substitute(sel, all), label, start, end)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if len(vals) == 0 {
			return nil, fmt.Errorf("variable %s: %s found no values", v.Name, q)
		}
		sort.Strings(vals)
		rv := resolvedVar{variable: v, values: vals}
		all[v.Name] = rv.allText()
		vars = append(vars, rv)
	}
	out := []combination{{name: "all at All", vals: all}}
	for _, v := range vars {
		for _, val := range v.values {
			c := varValues{}
			for k, s := range all {
				c[k] = s
			}
			c[v.Name] = promRegexEscape(val)
			out = append(out, combination{name: v.Name + "=" + val, vals: c})
		}
	}
	return out, nil
}

func TestDashboardQueriesReturnData(t *testing.T) {
	f := framework.Get(t)
	dashboards := loadDashboards(t)
	prom := startPrometheus(t)
	promStart := time.Now()

	nss := createLoad(t, f, namespaces)
	auditDir := framework.AuditDir(t)
	k := f.NewKShard(t, framework.KShardOptions{
		Audit:     true,
		ShardArgs: []string{"--controllers", "*,kshard-audit", "--audit-resync-interval", "1s", "--audit-work-duration", "5ms"},
	})
	k.SetShardArgs(func(name string) []string {
		return []string{"--audit-log-file", filepath.Join(auditDir, name+".jsonl")}
	})
	for _, name := range []string{"coordinator-a", "coordinator-b"} {
		prom.addCoordinator(k.StartCoordinator(name))
	}
	for i := range 3 {
		prom.addShard(k.StartShard(fmt.Sprintf("shard-%d", i)))
	}
	k.WaitAllOwned(t, 90*time.Second)
	// Scale out: the fourth shard takes a quarter of the partitions, so moves, handoffs
	// and ownership gaps are observed.
	prom.addShard(k.StartShard("shard-3"))
	k.WaitAllOwned(t, 90*time.Second)
	nss = loadEveryShard(t, f, k, nss)
	// Every target, the fourth shard included, must be scraped before the rollout: its API
	// requests have to fall between two scrapes to show in a rate (CI once saw the fourth
	// shard's latency panels all NaN when its file_sd target was picked up late).
	waitScraped(t, prom, 2+4)
	// Two rollouts: a series a shard creates during the first (a verb it had not used) has
	// no earlier sample, so only the second shows up in a rate.
	rollOut(t, f, nss, "registry.example/web:1.1")
	collectAndCount(t, f, nss, 1)
	waitScraped(t, prom, 2+4)
	rollOut(t, f, nss, "registry.example/web:1.2")
	collectAndCount(t, f, nss, 2)
	waitScraped(t, prom, 2+4)
	// Let every target, the fourth shard included, be scraped for one more rate window and
	// step, so the last steps of a range query see it as Grafana's "now" would.
	time.Sleep(rateInterval() + 2*step)
	end := time.Now()
	t.Logf("load running for %s; querying every dashboard panel over it", end.Sub(promStart).Round(time.Second))

	builtins := varValues{
		"__rate_interval": fmt.Sprintf("%ds", int(rateInterval().Seconds())),
		"__interval":      fmt.Sprintf("%ds", int(step.Seconds())),
		"__interval_ms":   fmt.Sprint(step.Milliseconds()),
		"__range":         fmt.Sprintf("%ds", int(end.Sub(promStart).Seconds())+1),
		"__range_s":       fmt.Sprint(int(end.Sub(promStart).Seconds()) + 1),
		"__range_ms":      fmt.Sprint(end.Sub(promStart).Milliseconds()),
	}
	ctx := context.Background()
	total := 0
	for _, d := range dashboards {
		t.Run(d.File, func(t *testing.T) {
			combos, err := combinations(ctx, prom, d, builtins, promStart, end)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range combos {
				for _, p := range d.leaves() {
					for _, tg := range p.Targets {
						expr := substitute(tg.Expr, c.vals)
						var r apiResult
						if tg.Instant {
							r, err = prom.query(ctx, expr, end)
						} else {
							r, err = prom.queryRange(ctx, expr, promStart, end, step)
						}
						total++
						where := fmt.Sprintf("panel %q target %s (%s)\n  query: %s", p.Title, tg.RefID, c.name, expr)
						if err != nil {
							t.Errorf("%s\n  error: %v", where, err)
							continue
						}
						series, numbers := r.counts()
						switch {
						case series == 0:
							t.Errorf("%s\n  returned no series", where)
						case numbers == 0:
							t.Errorf("%s\n  returned %d series, all NaN", where, series)
						}
					}
				}
			}
			t.Logf("%d panels × %d variable fillings checked (%s)", len(d.leaves()), len(combos), combosNames(combos))
		})
	}
	t.Logf("%d queries answered through %s", total, prom.URL)
}

func combosNames(cs []combination) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}
