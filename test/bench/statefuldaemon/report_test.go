package statefuldaemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/kshard/kshard/test/bench/benchkit"
	"github.com/kshard/kshard/test/framework"
)

// phaseKey names a phase in metrics: ds-create, ds-update, sts-create, sts-update.
func phaseKey(kind string, update bool) string {
	k := "ds"
	if kind == statefulSets {
		k = "sts"
	}
	if update {
		return k + "-update"
	}
	return k + "-create"
}

func report(b *testing.B, r result) {
	for _, p := range r.phases {
		b.ReportMetric(p.took.Seconds(), phaseKey(p.kind, p.update)+"-s")
	}
	b.ReportMetric(r.usage.ControllerCPU(), "controller-cpu-s")
	b.ReportMetric(r.usage.MaxControllerRSS()/mib, "max-process-peak-RSS-MiB")
}

// summary logs the tables (median [min–max] over the repetitions; ratios pair the runs
// of one repetition) and writes them to the artifacts folder as summary.txt.
func summary(b *testing.B, s sizes, configs []config, results []result) {
	if len(results) == 0 {
		return
	}
	byConfig := map[string][]result{}
	for _, r := range results {
		byConfig[r.Name] = append(byConfig[r.Name], r)
	}
	type phaseID struct {
		kind   string
		update bool
	}
	var phases []phaseID
	for _, r := range results {
		for _, p := range r.phases {
			if id := (phaseID{p.kind, p.update}); !slices.Contains(phases, id) {
				phases = append(phases, id)
			}
		}
	}
	// took is a run's time for phase id, or for every phase (all).
	took := func(r result, id phaseID, all bool) (float64, bool) {
		if all {
			t := 0.0
			for _, p := range r.phases {
				t += p.took.Seconds()
			}
			return t, len(r.phases) > 0
		}
		p, ok := r.phase(id.kind, id.update)
		return p.took.Seconds(), ok
	}
	// ratio pairs, per repetition, config num's time with config den's.
	ratio := func(num, den string, id phaseID, all bool) []float64 {
		var out []float64
		for _, n := range byConfig[num] {
			for _, d := range byConfig[den] {
				tn, ok1 := took(n, id, all)
				td, ok2 := took(d, id, all)
				if d.rep == n.rep && ok1 && ok2 && tn > 0 {
					out = append(out, tn/td)
				}
			}
		}
		return out
	}
	spread := func(rs []result, f func(result) (float64, bool)) framework.Spread {
		var xs []float64
		for _, r := range rs {
			if v, ok := f(r); ok {
				xs = append(xs, v)
			}
		}
		return framework.SpreadOf(xs)
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "%d kwok nodes; %d DaemonSets (maxUnavailable %s, maxSurge 0); %d StatefulSets x %d replicas (%s); one object a namespace; %d repetition(s); every controller process: %s\n\n",
		s.nodes, s.daemonSets, s.maxUnavailable.String(), s.stsNamespaces, s.stsReplicas, s.policy, s.reps, strings.Join(controllerArgs(), " "))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "phase\trun\ttime (s)\tper-object p50 (s)\tvs upstream\tspeedup vs kshard-1\tbusiest shard's share (even-split ceiling)\tbusiest process req/s (limiter wait s)\tapiserver cores\tetcd cores\tscheduler+kwok cores\tmachine busy cores (of %d)\tload avg\tbound\n", cores)
	for _, id := range append(phases, phaseID{}) {
		all := id == phaseID{}
		label := "all phases"
		if !all {
			label = phaseResult{kind: id.kind, update: id.update}.name()
		}
		for _, c := range configs {
			rs := byConfig[c.Name]
			if len(rs) == 0 {
				continue
			}
			t := spread(rs, func(r result) (float64, bool) { return took(r, id, all) })
			vsUp, speedup, share := "-", "-", "-"
			if c.Shards > 0 {
				vsUp = framework.SpreadOf(ratio(c.Name, "upstream", id, all)).Format("%.2f")
				speedup = framework.SpreadOf(invert(ratio(c.Name, "kshard-1", id, all))).Format("%.2f")
			}
			if all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t\t%s\t%s\n", label, c.Name, t.Format("%.1f"), vsUp, speedup)
				continue
			}
			if c.Shards > 0 {
				sh := spread(rs, func(r result) (float64, bool) { v, ok := r.share[id.kind]; return v, ok })
				ceiling := spread(rs, func(r result) (float64, bool) { v, ok := r.share[id.kind]; return 1 / v, ok && v > 0 })
				share = fmt.Sprintf("%s (%s)", sh.Format("%.3f"), ceiling.Format("%.2f"))
			}
			ph := func(f func(p phaseResult) float64) framework.Spread {
				return spread(rs, func(r result) (float64, bool) {
					p, ok := r.phase(id.kind, id.update)
					if !ok {
						return 0, false
					}
					return f(p), true
				})
			}
			var bounds []string
			for _, r := range rs {
				if p, ok := r.phase(id.kind, id.update); ok && !slices.Contains(bounds, p.use.Bound(p.took, qps, cores)) {
					bounds = append(bounds, p.use.Bound(p.took, qps, cores))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s (%s)\t%s\t%s\t%s\t%s\t%s\t%s\n", label, c.Name, t.Format("%.1f"),
				ph(func(p phaseResult) float64 { return p.p50.Seconds() }).Format("%.1f"), vsUp, speedup, share,
				ph(func(p phaseResult) float64 { _, u := p.use.TopClient(); return u.Requests / p.took.Seconds() }).Format("%.1f"),
				ph(func(p phaseResult) float64 { _, u := p.use.TopClient(); return u.LimiterWait }).Format("%.0f"),
				ph(func(p phaseResult) float64 { return p.cores("kube-apiserver") }).Format("%.2f"),
				ph(func(p phaseResult) float64 { return p.cores("etcd") }).Format("%.2f"),
				ph(func(p phaseResult) float64 { return p.cores("kube-scheduler") + p.cores("kwok") }).Format("%.2f"),
				ph(func(p phaseResult) float64 { return p.use.Busy }).Format("%.2f"),
				ph(func(p phaseResult) float64 { return p.use.Load }).Format("%.1f"),
				strings.Join(bounds, "/"))
		}
	}
	_ = tw.Flush()

	sb.WriteString("\nper process, over the whole run (every phase):\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tcontroller CPU-s (sum)\tper controller process: peak RSS MiB, CPU-s\tcoordinator: peak RSS MiB, CPU-s\tkube-apiserver CPU-s\tetcd CPU-s\tkcm (others) CPU-s")
	for _, c := range configs {
		rs := byConfig[c.Name]
		if len(rs) == 0 {
			continue
		}
		procs := func(get func(r result) []benchkit.Usage) string {
			var names []string
			for _, r := range rs {
				for _, u := range get(r) {
					if !slices.Contains(names, u.Name) {
						names = append(names, u.Name)
					}
				}
			}
			var out []string
			for _, n := range names {
				of := func(f func(u benchkit.Usage) float64) framework.Spread {
					return spread(rs, func(r result) (float64, bool) {
						for _, u := range get(r) {
							if u.Name == n {
								return f(u), true
							}
						}
						return 0, false
					})
				}
				out = append(out, fmt.Sprintf("%s %s MiB, %s CPU-s", n, of(func(u benchkit.Usage) float64 { return u.PeakRSS / mib }).Format("%.0f"),
					of(func(u benchkit.Usage) float64 { return u.CPU }).Format("%.1f")))
			}
			if len(out) == 0 {
				return "-"
			}
			return strings.Join(out, "; ")
		}
		plane := func(n string) string {
			return spread(rs, func(r result) (float64, bool) { u, ok := r.usage.Plane[n]; return u.CPU, ok }).Format("%.1f")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, spread(rs, func(r result) (float64, bool) { return r.usage.ControllerCPU(), true }).Format("%.1f"),
			procs(func(r result) []benchkit.Usage { return r.usage.Controllers }), procs(func(r result) []benchkit.Usage { return r.usage.Coordinator }),
			plane("kube-apiserver"), plane("etcd"), plane("kube-controller-manager"))
	}
	_ = tw.Flush()
	sb.WriteString("\nmedian [min–max] over the repetitions; ratios pair the runs of one repetition. \"busiest process req/s\" is the requests the busiest controller process sent over the phase divided by the phase's time (the client limit is " +
		fmt.Sprint(qps) + "/s per controller); bound: QPS when that is >= 85 % of it, CPU when the machine's cores were >= 85 % busy. kube-controller-manager (others) is the cluster's own, running every controller but the measured ones.\n")
	b.Logf("summary:\n%s", sb.String())
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	b.Logf("summary written to %s", path)
}

func invert(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = 1 / x
	}
	return out
}
