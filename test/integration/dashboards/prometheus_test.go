package dashboards

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/framework/dashcheck"
)

// scrapeInterval is the Prometheus scrape interval of the test; Grafana's $__rate_interval
// is derived from it.
const scrapeInterval = time.Second

// sdTarget is one file_sd entry: addresses and the labels Prometheus attaches to them.
type sdTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// prometheus is a Prometheus server scraping the test's coordinators and shards, found
// through file_sd files the test rewrites as processes start.
type prometheus struct {
	*dashcheck.Server
	t      *testing.T
	dir    string
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
	p := &prometheus{t: t, dir: filepath.Join(framework.ArtifactsDir(t), "prometheus")}
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.writeTargets()
	cfg := fmt.Sprintf(promConfig, scrapeInterval, filepath.Join(p.dir, "coordinators.json"), filepath.Join(p.dir, "shards.json"))
	p.Server = dashcheck.Start(t, dashcheck.Options{Config: cfg, Dir: p.dir})
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
