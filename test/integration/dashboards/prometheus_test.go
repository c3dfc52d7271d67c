package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// scrapeInterval is the Prometheus scrape interval of the test; Grafana's $__rate_interval
// is derived from it.
const scrapeInterval = time.Second

// prometheusBinary builds Prometheus into the tool cache if it is missing (hack/tools.sh
// returns at once when it is there) and returns its path.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	tools := filepath.Join(framework.RepoRoot(), "hack", "tools.sh")
	build := exec.Command(tools, "prometheus")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("hack/tools.sh prometheus: %v\n%s", err, out)
	}
	out, err := exec.Command(tools, "path", "prometheus").Output()
	if err != nil {
		t.Fatalf("hack/tools.sh path prometheus: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// target is one file_sd entry: addresses and the labels Prometheus attaches to them.
type sdTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// prometheus is a Prometheus server scraping the test's coordinators and shards, found
// through file_sd files the test rewrites as processes start.
type prometheus struct {
	t      *testing.T
	dir    string
	URL    string
	proc   *framework.Process
	coords []sdTarget
	shards []sdTarget
}

// promConfig is the scrape configuration, the same as hack/demo.sh writes and as
// docs/observability.md asks a ServiceMonitor for: shards' own series carry their shard
// label (honor_labels keeps it), and the target's shard label gives it to the process and
// Go runtime series too. Coordinators get no shard label: their per-shard gauges have one.
const promConfig = `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: kshard-coordinator
    file_sd_configs:
      - files: [%[2]q]
        refresh_interval: 1s
  - job_name: kshard-shard
    honor_labels: true
    file_sd_configs:
      - files: [%[3]q]
        refresh_interval: 1s
`

func startPrometheus(t *testing.T) *prometheus {
	t.Helper()
	bin := prometheusBinary(t)
	p := &prometheus{t: t, dir: filepath.Join(framework.ArtifactsDir(t), "prometheus")}
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.writeTargets()
	cfg := filepath.Join(p.dir, "prometheus.yml")
	body := fmt.Sprintf(promConfig, scrapeInterval, filepath.Join(p.dir, "coordinators.json"), filepath.Join(p.dir, "shards.json"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	p.URL = "http://" + addr
	p.proc = framework.Start(t, "prometheus", bin, "--config.file="+cfg, "--storage.tsdb.path="+t.TempDir(),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
	framework.WaitHTTP(t, p.URL+"/-/ready", 60*time.Second)
	return p
}

// writeTargets rewrites the file_sd files; Prometheus rereads them within a second.
func (p *prometheus) writeTargets() {
	p.t.Helper()
	for name, ts := range map[string][]sdTarget{"coordinators.json": p.coords, "shards.json": p.shards} {
		if ts == nil {
			ts = []sdTarget{}
		}
		b, err := json.MarshalIndent(ts, "", "  ")
		if err != nil {
			p.t.Fatal(err)
		}
		tmp := filepath.Join(p.dir, name+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			p.t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(p.dir, name)); err != nil {
			p.t.Fatal(err)
		}
	}
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// addCoordinator and addShard make Prometheus scrape a process.
func (p *prometheus) addCoordinator(c *framework.Coordinator) {
	p.coords = append(p.coords, sdTarget{Targets: []string{hostPort(p.t, c.HTTPURL)}})
	p.writeTargets()
}

func (p *prometheus) addShard(s *framework.Shard) {
	p.shards = append(p.shards, sdTarget{Targets: []string{hostPort(p.t, s.HTTPURL)}, Labels: map[string]string{"shard": s.Name}})
	p.writeTargets()
}

// apiResult is the data of a /api/v1/query or /api/v1/query_range answer.
type apiResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`  // instant: [time, "value"]
		Values [][]any           `json:"values"` // range: [[time, "value"], ...]
	} `json:"result"`
}

// get calls a Prometheus HTTP API path and decodes the "data" of a success answer into out.
func (p *prometheus) get(ctx context.Context, path string, params url.Values, out any) error {
	code, body, err := framework.HTTPGet(ctx, p.URL+path+"?"+params.Encode())
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %d, not JSON: %.200s", path, code, body)
	}
	if code != http.StatusOK || env.Status != "success" {
		return fmt.Errorf("GET %s: %d %s: %s", path, code, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// queryRange runs a range query (what Grafana sends for a time series panel).
func (p *prometheus) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (apiResult, error) {
	var r apiResult
	err := p.get(ctx, "/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}, &r)
	return r, err
}

// query runs an instant query (what Grafana sends for a target with instant: true).
func (p *prometheus) query(ctx context.Context, expr string, at time.Time) (apiResult, error) {
	var r apiResult
	err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}}, &r)
	return r, err
}

// labelValues returns the values of label on the series matching selector (all series when
// empty) between start and end, as Grafana's label_values() does.
func (p *prometheus) labelValues(ctx context.Context, selector, label string, start, end time.Time) ([]string, error) {
	params := url.Values{"start": {unix(start)}, "end": {unix(end)}}
	if selector != "" {
		params.Set("match[]", selector)
	}
	var vals []string
	err := p.get(ctx, "/api/v1/label/"+label+"/values", params, &vals)
	return vals, err
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

// counts returns how many series a result has and how many of them have a sample that
// is a number (not NaN): histogram_quantile over an empty window gives NaN.
func (r apiResult) counts() (series, withNumbers int) {
	isNum := func(pair []any) bool {
		if len(pair) != 2 {
			return false
		}
		s, _ := pair[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && !math.IsNaN(f)
	}
	for _, s := range r.Result {
		series++
		ok := isNum(s.Value)
		for _, v := range s.Values {
			ok = ok || isNum(v)
		}
		if ok {
			withNumbers++
		}
	}
	return series, withNumbers
}
