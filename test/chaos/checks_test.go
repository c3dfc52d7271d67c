package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

// notConverged says what keeps the run from having converged since the faults stopped
// (nil: converged): the leader's assignment converged on exactly the live shards with
// nothing in flight, every live shard ready, every SIGTERMed shard gone, every Deployment
// complete, and every namespace reconciled by a live shard since.
func (c *chaos) notConverged(ctx context.Context, since time.Time, auditDir string) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []string
	live := c.k.Live()
	l, err := c.k.Leader(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	a, err := l.Assignments(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	if !a.Converged || a.MovesInFlight > 0 {
		out = append(out, fmt.Sprintf("assignment not converged: %d moves in flight, %v", a.MovesInFlight, a.ByState))
	}
	owned, owners := 0, map[string]bool{}
	for _, s := range a.Shards {
		owned += s.Partitions
		if s.Partitions > 0 {
			owners[s.Shard] = true
			if !live[s.Shard] {
				out = append(out, fmt.Sprintf("%s owns %d partitions but does not run", s.Shard, s.Partitions))
			}
		}
	}
	if owned != a.PartitionCount {
		out = append(out, fmt.Sprintf("%d of %d partitions owned", owned, a.PartitionCount))
	}
	for name := range live {
		if !owners[name] && c.leaving[name] == nil {
			out = append(out, fmt.Sprintf("live shard %s owns nothing", name))
		}
		if code, _, err := framework.HTTPGet(ctx, c.k.Shards[name].HTTPURL+"/readyz"); err != nil || code != http.StatusOK {
			out = append(out, fmt.Sprintf("shard %s not ready (%d, %v)", name, code, err))
		}
	}
	for name, s := range c.leaving {
		if !s.Exited() {
			out = append(out, fmt.Sprintf("shard %s still running since its SIGTERM", name))
		}
	}
	if p := c.w.incomplete(ctx); len(p) > 0 {
		out = append(out, fmt.Sprintf("%d Deployments not complete, e.g. %v", len(p), p[0]))
	}
	recs, err := auditlog.ReadDir(auditDir)
	if err != nil {
		return append(out, err.Error())
	}
	first := auditlog.FirstReconcileAfter(recs, since, live)
	var missing []string
	for _, ns := range c.w.nss {
		if _, ok := first[ns]; !ok {
			missing = append(missing, ns)
		}
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%d namespaces not reconciled by a live shard since the faults stopped, e.g. %s", len(missing), missing[0]))
	}
	return out
}

func (c *chaos) finalChecks(ctx context.Context, watch *framework.SurgeWatch, auditDir string) {
	t := c.t
	stopped := time.Now()
	c.logf("faults stopped (%d live shards: %v); waiting up to %s for convergence", len(c.liveShards()), c.liveShards(), convergeBound)
	var (
		last        []string
		atBound     []string
		convergedAt time.Time
	)
	// Past the bound, keep looking for a while: converging late and staying stuck are
	// different findings.
	for time.Since(stopped) < convergeBound+2*time.Minute {
		c.checkExits()
		last = c.notConverged(ctx, stopped, auditDir)
		if len(last) == 0 {
			convergedAt = time.Now()
			break
		}
		if time.Since(stopped) > convergeBound && atBound == nil {
			atBound = last
		}
		time.Sleep(time.Second)
	}
	switch took := convergedAt.Sub(stopped); {
	case convergedAt.IsZero():
		t.Errorf("STUCK: not converged %s after the faults stopped: %s", time.Since(stopped).Round(time.Second), strings.Join(last, "; "))
	case took > convergeBound:
		t.Errorf("converged only %s after the faults stopped (bound %s); at the bound: %s", took.Round(100*time.Millisecond), convergeBound, strings.Join(atBound, "; "))
	default:
		c.logf("converged %s after the faults stopped (bound %s)", took.Round(100*time.Millisecond), convergeBound)
	}
	if !convergedAt.IsZero() {
		if left, err := c.w.leftovers(ctx); err != nil {
			t.Error(err)
		} else {
			for _, l := range left {
				t.Errorf("after convergence: %s", l)
			}
		}
	}
	c.mon.stop()

	// Overlapping reconciles, over the whole run.
	recs, err := auditlog.ReadDir(auditDir)
	if err != nil {
		t.Fatal(err)
	}
	overlaps := auditlog.Overlaps(recs)
	for _, o := range overlaps[:min(10, len(overlaps))] {
		t.Errorf("overlapping reconciles: %s", o)
	}
	// The pod watch.
	surge := watch.Report()
	for _, v := range surge.Violations[:min(10, len(surge.Violations))] {
		t.Errorf("surge: %s", v)
	}
	if surge.Events == 0 {
		t.Error("the pod watch observed no pod events")
	}
	m := c.mon
	m.mu.Lock()
	lateAccepted, ownerRefused, advOwned, termDrops := m.lateAccepted, m.ownerRefused, m.advOwned, m.termDrops
	probes := sortedCounts(m.probes)
	polls, noLeader, longest := m.polls, m.noLeader, m.longestUnconverged
	m.mu.Unlock()
	for _, v := range lateAccepted {
		t.Errorf("late write accepted: %s", v)
	}
	for _, v := range advOwned {
		t.Errorf("forged claim: %s", v)
	}
	bursts, outcomes, welcomed := c.adv.report()
	for _, v := range welcomed {
		t.Errorf("adversary: %s", v)
	}

	// The report.
	var faults []string
	total := 0
	for _, k := range allFaults {
		if n := c.counts[k]; n > 0 {
			faults = append(faults, fmt.Sprintf("%s ×%d", k, n))
			total += n
		}
	}
	t.Logf("CHAOS REPORT (seed %d, %s of faults)", c.cfg.seed, c.cfg.duration)
	t.Logf("  faults: %d: %s", total, strings.Join(faults, ", "))
	if len(c.skipped) > 0 {
		t.Logf("  faults skipped (no victim in time): %v", c.skipped)
	}
	t.Logf("  workload: %d Deployments; driver: %d rollouts, %d scale changes, %d API errors", len(c.w.nss), c.w.rollouts.Load(), c.w.scales.Load(), c.w.errors.Load())
	t.Logf("  overlapping reconciles: %d (of %d audited reconciles)", len(overlaps), len(recs))
	t.Logf("  surge: %s", surge)
	t.Logf("  fence: %v denials counted by the API server (late writes refused); probes: %s; late writes accepted: %d",
		m.denials(), strings.Join(probes, ", "), len(lateAccepted))
	if len(ownerRefused) > 0 {
		t.Logf("  fence: an owner refused in its own namespace (label stable ≥2s) %d times, e.g. %s", len(ownerRefused), ownerRefused[0])
	}
	t.Logf("  adversary: %d bursts; %s; welcomed impostors: %d; partitions owned by the adversary: %d", bursts, strings.Join(outcomes, ", "), len(welcomed), len(advOwned))
	t.Logf("  leader polls: %d (%d without a leader); longest unconverged stretch during the faults: %s; highest term %d",
		polls, noLeader, longest.Round(time.Second), m.term())
	for _, d := range termDrops[:min(5, len(termDrops))] {
		t.Logf("  term seen lower than before (a resumed old leader answering Ready?): %s", d)
	}
	sort.Strings(c.unexpected)
	t.Logf("  processes that exited without a fault: %d", len(c.unexpected))
	for _, u := range c.unexpected {
		t.Logf("    %s", u)
	}
	if len(overlaps) > 0 {
		t.Errorf("%d overlapping reconciles by two shards", len(overlaps))
	}
	if len(surge.Violations) > 0 {
		t.Errorf("%d observed instants with a ReplicaSet above replicas+maxSurge", len(surge.Violations))
	}
}

func sortedCounts(m map[string]int) []string {
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return out
}
