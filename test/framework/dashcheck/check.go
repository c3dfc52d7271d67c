package dashcheck

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// Window is the time range the dashboards are queried over, as a Grafana user looking
// at it would see it.
type Window struct {
	Start, End time.Time
	// Step is the range queries' step, Grafana's $__interval: a panel a few hundred
	// pixels wide over a test's few minutes.
	Step time.Duration
	// ScrapeInterval is Prometheus's; $__rate_interval is derived from it.
	ScrapeInterval time.Duration
	// CountPlacement: the coordinators place by count (--placement=count, the chart's
	// default), so the series of a load plan (loadPlanSeries) do not exist and the
	// targets that read them may return none. Left false, they must have data.
	CountPlacement bool
}

// loadPlanSeries are the coordinator's series that exist only once it has applied a
// plan by load (--placement=load).
var loadPlanSeries = regexp.MustCompile(`kshard_coordinator_load_(fair|imbalance)\b`)

// RateInterval is Grafana's $__rate_interval: max($__interval + scrape interval,
// 4 × scrape interval).
func RateInterval(step, scrapeInterval time.Duration) time.Duration {
	return max(step+scrapeInterval, 4*scrapeInterval)
}

// builtinValues are Grafana's built-in variables over w.
func (w Window) builtinValues() varValues {
	r := w.End.Sub(w.Start)
	return varValues{
		"__rate_interval": fmt.Sprintf("%ds", int(RateInterval(w.Step, w.ScrapeInterval).Seconds())),
		"__interval":      fmt.Sprintf("%ds", int(w.Step.Seconds())),
		"__interval_ms":   fmt.Sprint(w.Step.Milliseconds()),
		"__range":         fmt.Sprintf("%ds", int(r.Seconds())+1),
		"__range_s":       fmt.Sprint(int(r.Seconds()) + 1),
		"__range_ms":      fmt.Sprint(r.Milliseconds()),
	}
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
	Variable
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
	// variable is the one variable not at All ("" when every one is).
	variable string
}

// combinations resolves the dashboard's variables through their own label_values queries
// (in order, each with the earlier ones at All) and returns: every variable at All, then
// each value of each variable alone with the others at All.
func combinations(ctx context.Context, p *Server, d *Dashboard, w Window) ([]combination, error) {
	all := w.builtinValues()
	var vars []resolvedVar
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.PromQL()
		if err != nil {
			return nil, err
		}
		sel, label, err := parseLabelValues(q)
		if err != nil {
			return nil, err
		}
		vals, err := p.LabelValues(ctx, substitute(sel, all), label, w.Start, w.End)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if len(vals) == 0 {
			return nil, fmt.Errorf("variable %s: %s found no values", v.Name, q)
		}
		sort.Strings(vals)
		rv := resolvedVar{Variable: v, values: vals}
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
			out = append(out, combination{name: v.Name + "=" + val, vals: c, variable: v.Name})
		}
	}
	return out, nil
}

// mayIdle are the variables one value of which may select series with no numbers over
// the load (all NaN), as long as the series exist: a work queue that received no key
// (the disruption controller's recheck queue holds keys only when a budget's disrupted
// pod is due), whose latency panels are then empty, as Grafana shows an idle queue.
// Every controller, by contrast, must work during the load.
var mayIdle = map[string]bool{"queue": true}

// absence is a panel that may return no series at all for some values of one variable,
// and why; every other filling of its variables must still return numbers.
type absence struct {
	panel, variable string
	values          *regexp.Regexp
	reason          string
}

// mayBeAbsent are the panels whose series exist for some values of a variable only.
// "Rate-limiter wait by controller" counts the wait of a controller's clients under its
// name, while the garbage collector reconciles through two queues whose names are its
// kshard_controller_reconciles_total{controller} (and so values of $controller) and
// whose clients are the one garbagecollector's: selected alone, those two names match no
// wait series (the garbage collector's wait shows under All, as garbagecollector).
var mayBeAbsent = []absence{{
	panel: "Rate-limiter wait by controller", variable: "controller",
	values: regexp.MustCompile(`^garbage_collector_attempt_to_(delete|orphan)$`),
	reason: "the garbage collector's queues reconcile under their own names; its clients wait as garbagecollector",
}}

// absent says why panel may return no series for c, or "" when it must return some.
func absent(panel string, c combination) string {
	for _, a := range mayBeAbsent {
		if a.panel == panel && a.variable == c.variable && a.values.MatchString(unescapedValue(c)) {
			return a.reason
		}
	}
	return ""
}

// unescapedValue is the value c gives its one variable not at All, as the variable's
// query found it ("" when every variable is at All).
func unescapedValue(c combination) string {
	if c.variable == "" {
		return ""
	}
	return strings.TrimPrefix(c.name, c.variable+"=")
}

// CheckQueries runs every query of every panel of every dashboard over w, for every
// variable at All and for each value of each variable alone, as Grafana would, and fails
// t (one subtest per dashboard) for each query that errs, returns no series, or returns
// only NaN. It returns how many queries were answered.
func CheckQueries(t *testing.T, p *Server, dashboards []*Dashboard, w Window) int {
	t.Helper()
	ctx := context.Background()
	total := 0
	for _, d := range dashboards {
		t.Run(d.File, func(t *testing.T) {
			combos, err := combinations(ctx, p, d, w)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range combos {
				for _, pn := range d.Leaves() {
					for _, tg := range pn.Targets {
						expr := substitute(tg.Expr, c.vals)
						var r Result
						if tg.Instant {
							var at time.Time
							r, at, err = instantNearEnd(ctx, p, expr, w)
							if !at.Equal(w.End) {
								t.Logf("panel %q target %s (%s): no series at the window's end, some %s before it (a scrape that failed on a loaded machine)",
									pn.Title, tg.RefID, c.name, w.End.Sub(at))
							}
						} else {
							r, err = p.QueryRange(ctx, expr, w.Start, w.End, w.Step)
						}
						total++
						where := fmt.Sprintf("panel %q target %s (%s)\n  query: %s", pn.Title, tg.RefID, c.name, expr)
						if err != nil {
							t.Errorf("%s\n  error: %v", where, err)
							continue
						}
						switch series, numbers := r.Counts(); {
						case series == 0 && absent(pn.Title, c) != "":
							t.Logf("%s\n  returned no series, allowed: %s", where, absent(pn.Title, c))
						case series == 0 && w.CountPlacement && loadPlanSeries.MatchString(tg.Expr):
							t.Logf("%s\n  returned no series, allowed: the coordinators place by count, so no load plan's series exist", where)
						case series == 0:
							t.Errorf("%s\n  returned no series; %s", where, scrapeHealth(ctx, p, w))
						case numbers == 0 && mayIdle[c.variable]:
							t.Logf("%s\n  returned %d series, all NaN: idle over the load, allowed for %s", where, series, c.variable)
						case numbers == 0:
							t.Errorf("%s\n  returned %d series, all NaN", where, series)
						}
					}
				}
			}
			t.Logf("%d panels × %d variable fillings checked (%s)", len(d.Leaves()), len(combos), combosNames(combos))
		})
	}
	return total
}

func combosNames(cs []combination) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

// instantNearEnd runs an instant query at the window's end and, when that finds no
// series, at each of the three scrape instants before it, and returns the first answer
// with series and its instant. A scrape that fails (its timeout is the scrape interval,
// which a loaded 2-core machine can exceed) marks its target's series stale until the
// next one, so one instant can miss a target whose series exist; a panel whose query is
// wrong finds nothing at any of them.
func instantNearEnd(ctx context.Context, p *Server, expr string, w Window) (Result, time.Time, error) {
	var first Result
	for k := range 4 {
		at := w.End.Add(-time.Duration(k) * w.ScrapeInterval)
		r, err := p.Query(ctx, expr, at)
		if err != nil {
			return r, at, err
		}
		if k == 0 {
			first = r
		}
		if series, _ := r.Counts(); series > 0 {
			return r, at, nil
		}
	}
	return first, w.End, nil
}

// scrapeHealth says, per target, how many of its scrapes over w failed and the longest
// scrape: what a panel without series for one target needs to be told apart from a
// wrong query.
func scrapeHealth(ctx context.Context, p *Server, w Window) string {
	span := fmt.Sprintf("%ds", int(w.End.Sub(w.Start).Seconds())+1)
	failed, err := p.Query(ctx, fmt.Sprintf("count_over_time((up == 0)[%s:%s])", span, w.ScrapeInterval), w.End)
	if err != nil {
		return "scrape health unknown: " + err.Error()
	}
	longest, err := p.Query(ctx, fmt.Sprintf("max_over_time(scrape_duration_seconds[%s])", span), w.End)
	if err != nil {
		return "scrape health unknown: " + err.Error()
	}
	target := func(m map[string]string) string {
		if s := m["shard"]; s != "" {
			return m["job"] + "/" + s
		}
		return m["job"] + "/" + m["instance"]
	}
	fails := map[string]string{}
	for _, r := range failed.Result {
		if len(r.Value) == 2 {
			fails[target(r.Metric)], _ = r.Value[1].(string)
		}
	}
	var parts []string
	for _, r := range longest.Result {
		v := "?"
		if len(r.Value) == 2 {
			v, _ = r.Value[1].(string)
		}
		n := fails[target(r.Metric)]
		if n == "" {
			n = "0"
		}
		parts = append(parts, fmt.Sprintf("%s %s failed, longest %ss", target(r.Metric), n, v))
	}
	sort.Strings(parts)
	return "scrapes over the window: " + strings.Join(parts, "; ")
}

// WaitScraped waits until Prometheus has scraped at least targets targets successfully
// within the last scrapeWindow and has seen a partition move and a reconcile in that
// window. A window, not the instant: one scrape that times out on a loaded machine marks
// its target's series stale until the next scrape, which is no reason to wait; a target
// never scraped, or down for the whole window, is. The failure names each target's last
// scrape (up, duration).
func WaitScraped(t testing.TB, p *Server, targets int) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "Prometheus scraped every target and the moves", func(ctx context.Context) (bool, error) {
		for _, c := range []struct {
			expr string
			want float64
		}{
			{fmt.Sprintf(`count(max_over_time(up[%s]) == 1)`, scrapeWindow), float64(targets)},
			{fmt.Sprintf(`sum(max_over_time(kshard_coordinator_moves_finished_total[%s]))`, scrapeWindow), 1},
			{fmt.Sprintf(`count(max_over_time(kshard_controller_reconciles_total[%s]) > 0)`, scrapeWindow), 1},
		} {
			got, err := p.Scalar(ctx, c.expr)
			if err != nil {
				return false, fmt.Errorf("%w; %s", err, lastScrapes(ctx, p))
			}
			if got < c.want {
				return false, fmt.Errorf("%s = %v, want ≥ %v; %s", c.expr, got, c.want, lastScrapes(ctx, p))
			}
		}
		return true, nil
	})
}

// scrapeWindow is how recent a successful scrape must be for WaitScraped.
const scrapeWindow = "15s"

// lastScrapes describes every target's last scrape: whether it was up and how long it
// took (a scrape longer than the scrape timeout is down).
func lastScrapes(ctx context.Context, p *Server) string {
	now := time.Now()
	up, err := p.Query(ctx, "up", now)
	if err != nil {
		return "targets unknown: " + err.Error()
	}
	dur, err := p.Query(ctx, "scrape_duration_seconds", now)
	if err != nil {
		return "targets unknown: " + err.Error()
	}
	took := map[string]string{}
	for _, r := range dur.Result {
		if len(r.Value) == 2 {
			took[r.Metric["job"]+"/"+r.Metric["instance"]], _ = r.Value[1].(string)
		}
	}
	var parts []string
	for _, r := range up.Result {
		v := "?"
		if len(r.Value) == 2 {
			v, _ = r.Value[1].(string)
		}
		key := r.Metric["job"] + "/" + r.Metric["instance"]
		name := key
		if s := r.Metric["shard"]; s != "" {
			name += " (" + s + ")"
		}
		parts = append(parts, fmt.Sprintf("%s up=%s in %ss", name, v, took[key]))
	}
	sort.Strings(parts)
	return fmt.Sprintf("last scrapes of %d targets: %s", len(parts), strings.Join(parts, ", "))
}
