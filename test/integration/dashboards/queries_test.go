package dashboards

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/framework/dashcheck"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	// namespaces of load at the start: each has an audited ConfigMap and a Deployment.
	namespaces = 24
	// step of the range queries, like a Grafana panel a few hundred pixels wide over the
	// test's few minutes; $__interval is the step.
	step = 2 * time.Second
)

// balanceArgs run the coordinators with --placement=load and balance settings short
// enough for the test's few minutes: load reports every 2 s (a shard rounds it to whole
// heartbeats), averaged over a 6 s half-life (the least, 3 reports), a round every 4 s
// (the least, 2 reports) from 4 s after a coordinator starts leading.
var balanceArgs = []string{"--placement=load", "--load-report-interval=2s", "--load-half-life=6s",
	"--balance-interval=4s", "--balance-warmup=4s"}

func TestDashboardQueriesReturnData(t *testing.T) {
	f := framework.Get(t)
	dashboards := dashcheck.Load(t)
	prom := startPrometheus(t)
	promStart := time.Now()

	nss := dashcheck.CreateLoad(t, f, namespaces)
	auditDir := framework.AuditDir(t)
	k := f.NewKShard(t, framework.KShardOptions{
		Audit:     true,
		ShardArgs: []string{"--controllers", "*,kshard-audit", "--audit-resync-interval", "1s", "--audit-work-duration", "5ms"},
		// Placement by load, so the load panels (fair share, imbalance, rounds) have data:
		// every plan the leader applies sets the fair share and imbalance, and load rounds
		// come every few seconds instead of every minute after two. The balancer's move and
		// round counters exist from the start at 0 for every reason and outcome, so a panel
		// of a reason no move had (pin, hot) shows zeros, as Grafana would.
		CoordinatorArgs: balanceArgs,
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
	nss = dashcheck.LoadEveryShard(t, f, dashcheck.PartitionOwners(func(ctx context.Context) (coordinatorrpc.Assignments, error) {
		l, err := k.Leader(ctx)
		if err != nil {
			return coordinatorrpc.Assignments{}, err
		}
		return l.Assignments(ctx)
	}), nss)
	// Every target, the fourth shard included, must be scraped before the rollout: its API
	// requests have to fall between two scrapes to show in a rate (CI once saw the fourth
	// shard's latency panels all NaN when its file_sd target was picked up late).
	dashcheck.WaitScraped(t, prom.Server, 2+4)
	// Two rollouts: a series a shard creates during the first (a verb it had not used) has
	// no earlier sample, so only the second shows up in a rate.
	dashcheck.RollOut(t, f, nss, "registry.example/web:1.1")
	dashcheck.CollectAndCount(t, f, nss, 1)
	dashcheck.WaitScraped(t, prom.Server, 2+4)
	dashcheck.RollOut(t, f, nss, "registry.example/web:1.2")
	dashcheck.CollectAndCount(t, f, nss, 2)
	dashcheck.WaitScraped(t, prom.Server, 2+4)
	// The load panels show more than the zeros they start at only once the leader placed
	// by load and ran load rounds: a coordinator that ignored balanceArgs fails here.
	framework.Eventually(t, 30*time.Second, "the leader applied a load plan and ran load rounds", func(ctx context.Context) (bool, error) {
		for _, expr := range []string{
			`count(kshard_coordinator_load_fair and on(instance) kshard_coordinator_leader == 1)`,
			`sum(kshard_coordinator_balancer_rounds_total and on(instance) kshard_coordinator_leader == 1)`,
		} {
			if got, err := prom.Scalar(ctx, expr); err != nil || got < 1 {
				return false, fmt.Errorf("%s = %v (%v), want ≥ 1", expr, got, err)
			}
		}
		return true, nil
	})
	for _, expr := range []string{"sum by (reason) (kshard_coordinator_balancer_moves_total)", "sum by (outcome) (kshard_coordinator_balancer_rounds_total)"} {
		if r, err := prom.Query(context.Background(), expr, time.Now()); err == nil {
			var parts []string
			for _, s := range r.Result {
				if len(s.Value) == 2 {
					parts = append(parts, fmt.Sprintf("%s=%v", s.Metric["reason"]+s.Metric["outcome"], s.Value[1]))
				}
			}
			t.Logf("%s: %s", expr, strings.Join(parts, " "))
		}
	}
	// Let every target, the fourth shard included, be scraped for one more rate window and
	// step, so the last steps of a range query see it as Grafana's "now" would.
	time.Sleep(dashcheck.RateInterval(step, scrapeInterval) + 2*step)
	end := time.Now()
	t.Logf("load running for %s; querying every dashboard panel over it", end.Sub(promStart).Round(time.Second))
	total := dashcheck.CheckQueries(t, prom.Server, dashboards, dashcheck.Window{Start: promStart, End: end, Step: step, ScrapeInterval: scrapeInterval})
	t.Logf("%d queries answered through %s", total, prom.URL)
}
