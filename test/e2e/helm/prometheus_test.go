package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/framework/dashcheck"
	"github.com/kshard/kshard/test/integration/chart"
)

const (
	// scrapeInterval is the ServiceMonitor's interval in this test (the chart's default is
	// 30 s): the dashboards' rates need a few scrapes of a few minutes' load.
	scrapeInterval = time.Second
	// step of the dashboards' range queries, Grafana's $__interval.
	step = 2 * time.Second
)

// serviceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor the scrape
// configuration is made from.
type serviceMonitor struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any"`
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string           `json:"port"`
			Path          string           `json:"path"`
			Interval      string           `json:"interval"`
			ScrapeTimeout string           `json:"scrapeTimeout"`
			HonorLabels   bool             `json:"honorLabels"`
			Relabelings   []map[string]any `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// renderServiceMonitor renders the chart's ServiceMonitor with the release's values (the
// install has it off: this cluster has no Prometheus Operator CRDs).
func (e *e2e) renderServiceMonitor(t *testing.T) serviceMonitor {
	t.Helper()
	args := append([]string{"template", release, chart.ChartDir(), "--namespace", namespace}, e.values...)
	args = append(args, "--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.serviceMonitor.interval="+scrapeInterval.String(), "--set", "metrics.serviceMonitor.scrapeTimeout="+scrapeInterval.String(),
		"--show-only", "templates/servicemonitor.yaml")
	out := e.helm(t, args...)
	var sm serviceMonitor
	if err := yaml.Unmarshal([]byte(out), &sm); err != nil {
		t.Fatalf("the chart's ServiceMonitor: %v\n%s", err, out)
	}
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("the chart rendered no ServiceMonitor with endpoints:\n%s", out)
	}
	return sm
}

// labelNameRE is what Prometheus's Kubernetes discovery replaces in label names.
var labelNameRE = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// scrapeConfig makes the Prometheus scrape configuration of a ServiceMonitor as the
// Prometheus Operator does: discovery of the endpoint slices of the selected namespaces,
// the Services kept by the selector's labels, the endpoints by port name, the
// operator's target labels (namespace, service, pod, container, job, endpoint), then the
// ServiceMonitor's own relabelings. What the operator would do with fields this chart
// does not use (matchExpressions, any namespace) fails the test rather than be ignored.
func scrapeConfig(t *testing.T, sm serviceMonitor, kubeconfig string) string {
	t.Helper()
	if len(sm.Spec.Selector.MatchExpressions) > 0 || sm.Spec.NamespaceSelector.Any {
		t.Fatalf("the ServiceMonitor uses selector fields this translation does not handle: %+v", sm.Spec)
	}
	names := sm.Spec.NamespaceSelector.MatchNames
	if len(names) == 0 {
		names = []string{sm.Metadata.Namespace}
	}
	var jobs []map[string]any
	for i, ep := range sm.Spec.Endpoints {
		var relabel []map[string]any
		keys := make([]string, 0, len(sm.Spec.Selector.MatchLabels))
		for k := range sm.Spec.Selector.MatchLabels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			l := labelNameRE.ReplaceAllString(k, "_")
			relabel = append(relabel, map[string]any{"action": "keep",
				"source_labels": []string{"__meta_kubernetes_service_label_" + l, "__meta_kubernetes_service_labelpresent_" + l},
				"regex":         "(" + regexp.QuoteMeta(sm.Spec.Selector.MatchLabels[k]) + ");true"})
		}
		relabel = append(relabel,
			map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpointslice_port_name"}, "regex": ep.Port},
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job"},
			map[string]any{"target_label": "endpoint", "replacement": ep.Port})
		for _, r := range ep.Relabelings {
			relabel = append(relabel, promRelabel(t, r))
		}
		path := ep.Path
		if path == "" {
			path = "/metrics"
		}
		jobs = append(jobs, map[string]any{
			"job_name":        fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.Metadata.Namespace, sm.Metadata.Name, i),
			"honor_labels":    ep.HonorLabels,
			"scrape_interval": ep.Interval,
			"scrape_timeout":  ep.ScrapeTimeout,
			"metrics_path":    path,
			"kubernetes_sd_configs": []map[string]any{{"role": "endpointslice", "kubeconfig_file": kubeconfig,
				"namespaces": map[string]any{"names": names}}},
			"relabel_configs": relabel,
		})
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": scrapeInterval.String(), "evaluation_interval": scrapeInterval.String()},
		"scrape_configs": jobs,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// promRelabel translates a ServiceMonitor relabeling (camelCase) into Prometheus's
// (snake_case); an unknown field fails the test.
func promRelabel(t *testing.T, r map[string]any) map[string]any {
	t.Helper()
	fields := map[string]string{"sourceLabels": "source_labels", "separator": "separator", "targetLabel": "target_label",
		"regex": "regex", "modulus": "modulus", "replacement": "replacement", "action": "action"}
	out := map[string]any{}
	for k, v := range r {
		name, ok := fields[k]
		if !ok {
			t.Fatalf("relabeling field %q not translated: %v", k, r)
		}
		if k == "action" {
			v = strings.ToLower(fmt.Sprint(v))
		}
		out[name] = v
	}
	return out
}

// prometheusAndDashboards: a Prometheus in the real node's network namespace, configured
// from the chart's ServiceMonitor, scrapes every coordinator and shard pod; a scale-out
// and the dashboards' load (test/framework/dashcheck) run; every query of every dashboard
// panel returns data, for every variable at All and each value alone.
func (e *e2e) prometheusAndDashboards(t *testing.T) {
	dashboards := dashcheck.Load(t)
	sm := e.renderServiceMonitor(t)
	dir := filepath.Join(framework.ArtifactsDir(t), "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The API server is at the same address inside the node's namespace (its relay), so
	// the test's own kubeconfig serves Prometheus's discovery.
	cfg := scrapeConfig(t, sm, e.f.Kubeconfig)
	t.Logf("scrape configuration made from the ServiceMonitor %s/%s:\n%s", sm.Metadata.Namespace, sm.Metadata.Name, cfg)
	prom := dashcheck.Start(t, dashcheck.Options{Config: cfg, Dir: dir, Wrap: []string{"nsenter", "--net=/run/netns/" + netns}, Socket: true})
	promStart := time.Now()

	// Scale out: moves, handoffs and ownership gaps while Prometheus watches.
	e.kubectl(t, "-n", namespace, "scale", "deployment", "kshard-shard", "--replicas=4")
	a := e.waitOwned(t, 4, 3*time.Minute)
	t.Logf("scaled out to 4 shards: %s", shardSummary(a))
	coordinators := len(e.pods(t, "coordinator"))
	owners := dashcheck.PartitionOwners(func(ctx context.Context) (coordinatorrpc.Assignments, error) {
		return assignments(ctx, e.leader(t), httpPort)
	})
	// The namespaces live as long as the whole test: waitNamespacesGone waits for them.
	nss := dashcheck.LoadEveryShard(e.parent, e.f, owners, dashcheck.CreateLoad(e.parent, e.f, 8))
	e.dashboardLoad = nss
	targets := coordinators + 4
	dashcheck.WaitScraped(t, prom, targets)
	for round := 1; round <= 2; round++ {
		dashcheck.RollOut(t, e.f, nss, fmt.Sprintf("registry.example/web:1.%d", round))
		dashcheck.CollectAndCount(t, e.f, nss, round)
		dashcheck.WaitScraped(t, prom, targets)
	}
	// One more rate window and step of scrapes, so the last steps of a range query see
	// every target as Grafana's "now" would.
	time.Sleep(dashcheck.RateInterval(step, scrapeInterval) + 2*step)
	end := time.Now()
	up, err := prom.Query(context.Background(), "up", end)
	if err != nil {
		t.Fatal(err)
	}
	var scraped []string
	for _, r := range up.Result {
		scraped = append(scraped, fmt.Sprintf("%s(shard=%q up=%v)", r.Metric["pod"], r.Metric["shard"], r.Value[1]))
	}
	sort.Strings(scraped)
	t.Logf("Prometheus scrapes %d pods found through the ServiceMonitor's selector: %s", len(scraped), strings.Join(scraped, ", "))
	// The chart's default placement is by count: the load plan's series do not exist.
	total := dashcheck.CheckQueries(t, prom, dashboards, dashcheck.Window{Start: promStart, End: end, Step: step, ScrapeInterval: scrapeInterval,
		CountPlacement: true})
	t.Logf("%d dashboard queries over %s of load returned data", total, end.Sub(promStart).Round(time.Second))
}
