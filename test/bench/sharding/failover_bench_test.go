package sharding

// Failover as users run it: the chart's defaults (server-side fence on, --seize-after 2s,
// session TTL 28s + fencing margin 2s, kube-controller-manager's leader-election timings,
// --expected-shards = the shard replicas), 4 shards.
//
//   - KillShard4Chart: SIGKILL one of 4 shards; per namespace of the victim, the time from
//     the SIGKILL until a live shard reconciled it (p50, max), and overlaps (must be 0).
//   - StopShard4Chart: SIGSTOP one of 4 shards and cut its coordinator connection (it
//     reaches the coordinator through a proxy the benchmark closes): alive, cut off, and
//     still inside its session lease. Its partitions are seized and worked elsewhere;
//     then it is resumed (SIGCONT) for the rest of its lease, during which its own gate
//     lets its writes go, and only the API server's fence can stop them. Its late writes
//     are counted by who refused them, and those the API server accepted (must be 0).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

// writeConfigMap is the ConfigMap the audit controller of StopShard4Chart writes
// (--audit-write-configmap) in the namespaces that have one.
const writeConfigMap = "audit-writes"

// maxWriters bounds the victim's namespaces given a writeConfigMap: each is written once
// per audit resync by its owner, and the rest of the fixture must not pay for it.
const maxWriters = 100

// chartDefaults runs a scenario with the fence on and the coordinator as the chart runs
// it: the chart's leader-election timings (KShardOptions.KCMTimings: 15s/10s/2s) and
// --expected-shards. Session TTL, fencing margin, --seize-after (2s, not passed: the
// coordinator's default is the chart's), membership debounce and the shards' client QPS
// are the binaries' defaults, which the chart does not override.
func (e *env) chartDefaults(fn func(*testing.B)) func(*testing.B) {
	return func(b *testing.B) {
		e.fence, e.chart = true, true
		defer func() { e.fence, e.chart = false, false }()
		fn(b)
	}
}

// benchStopShard: see the file comment.
func (e *env) benchStopShard(b *testing.B) {
	const n = 4
	e.ensure(b, namespaces)
	nss := e.namespaces()
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		var proxy *framework.ByteProxy
		c := e.newClusterWith(b, fmt.Sprintf("p%d", i), n, clusterOptions{
			shardArgs: []string{"--audit-write-configmap", writeConfigMap},
			beforeShards: func(c *cluster) {
				// The victim (the first shard) reaches the coordinator only through a proxy,
				// which the scenario closes to cut it off.
				proxy = framework.StartByteProxy(b, c.coord.GRPCAddr)
				victim := fmt.Sprintf("%s-shard-1", c.prefix)
				c.k.SetShardCoordinators(func(name string, addrs []string) []string {
					if name == victim {
						return []string{proxy.Addr()}
					}
					return addrs
				})
			},
		})
		c.settle(fmt.Sprintf("%d shards", n), len(nss))
		c.waitAllReconciled(fmt.Sprintf("%d shards", n), c.started, nss)
		a, err := c.coord.Assignments(ctx)
		if err != nil {
			b.Fatal(err)
		}
		victim := c.shards[0]
		victimNS := e.ownedBy(a, nss, victim.Name)
		writers := victimNS[:min(len(victimNS), maxWriters)]
		isWriter := map[string]bool{}
		for _, ns := range writers {
			isWriter[ns] = true
		}
		// Every write to a writeConfigMap the API server accepts, as the watch sees it.
		w := watchWrites(b, e)
		defer w.stop()
		for _, ns := range writers {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: writeConfigMap}}
			if _, err := e.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		}
		// The victim writes them before it is stopped: the writes are real and accepted.
		framework.Eventually(b, waitLimit, "the victim's writes accepted in every writer namespace", func(context.Context) (bool, error) {
			if got := w.namespacesWrittenBy(victim.Name, time.Time{}); got < len(writers) {
				return false, fmt.Errorf("%d of %d", got, len(writers))
			}
			return true, nil
		})

		others := c.k.Live()
		delete(others, victim.Name)
		policy := c.k.FenceParams().Name
		denied0, err := e.f.FenceDenials(ctx, policy)
		if err != nil {
			b.Fatal(err)
		}
		logOffset := fileSize(b, c.coord.LogPath)
		mCoordBefore := scrape(b, c.coord.HTTPURL)
		tail := newAuditTail(c.audit)
		tail.skip(b)
		load := startLoad(b, e, c)

		// The victim's counters last, right before the stop: what it sends after them
		// counts as sent after the stop.
		mVictim0 := scrape(b, victim.HTTPURL)
		at := time.Now()
		if err := victim.Signal(syscall.SIGSTOP); err != nil {
			b.Fatal(err)
		}
		proxy.Close()
		took := tail.waitAllReconciled(b, "after SIGSTOP and the cut", at, victimNS, others)
		usage := load.stop(b)
		mCoordAfter := scrape(b, c.coord.HTTPURL)
		seized := expiredAt(b, c.coord.LogPath, logOffset, victim.Name)
		resumed := time.Now()
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			b.Fatal(err)
		}
		// The victim works on until its lease runs out (it last had a heartbeat
		// acknowledged just before the stop); then its own gate refuses every write.
		var leaseEnd time.Time
		framework.Eventually(b, ttl+margin+waitLimit, "the resumed victim fenced by its own lease", func(ctx context.Context) (bool, error) {
			v, err := framework.Metric(ctx, victim.HTTPURL, "kshard_shard_fenced")
			if err != nil || v != 1 {
				return false, fmt.Errorf("kshard_shard_fenced %v, %v", v, err)
			}
			leaseEnd = time.Now()
			return true, nil
		})
		// Writes it attempted after that are refused by its gate; a few resyncs more to
		// count them, and for the watch to deliver anything late.
		time.Sleep(auditResync + 2*time.Second)
		denied1, err := e.f.FenceDenials(ctx, policy)
		if err != nil {
			b.Fatal(err)
		}
		mVictim1 := scrape(b, victim.HTTPURL)
		recs, err := auditlog.ReadDir(c.audit)
		if err != nil {
			b.Fatal(err)
		}
		per := tail.perNamespace(at, victimNS, others)
		c.reportFence(b)
		c.stop()
		w.stop()

		// The victim's writes by result, from its own counters (kshard_audit_writes_total),
		// and its gate's refusals of any write (kshard_shard_refused_writes_total).
		writes := func(result string) float64 {
			return mVictim1.Value("kshard_audit_writes_total", `result="`+result+`"`) - mVictim0.Value("kshard_audit_writes_total", `result="`+result+`"`)
		}
		gateRefused := mVictim1.Value("kshard_shard_refused_writes_total") - mVictim0.Value("kshard_shard_refused_writes_total")
		// Every controller's API writes after the stop (it sends none while stopped), by
		// response code: an accepted one (2xx) would be a late write that landed.
		writesByCode := map[string]float64{}
		for _, m := range []struct {
			s    framework.Samples
			sign float64
		}{{mVictim1, 1}, {mVictim0, -1}} {
			for _, x := range m.s {
				switch x.Labels["method"] {
				case "POST", "PUT", "PATCH", "DELETE":
					if x.Name == "kshard_rest_client_requests_total" {
						writesByCode[x.Labels["code"]] += m.sign * x.Value
					}
				}
			}
		}
		var anyAccepted float64
		for code, v := range writesByCode {
			if strings.HasPrefix(code, "2") {
				anyAccepted += v
			}
		}
		// Accepted late writes: any write of the victim the watch saw stored that the
		// victim sent after the stop (it can send only once resumed).
		lateAccepted, landedAfterStop, werr := w.byShard(victim.Name, at)
		if werr != nil {
			b.Errorf("the watch of the writes failed, its counts are incomplete: %v", werr)
		}
		// Audit records of the victim after the stop: in writer namespaces a record is
		// written only when the API server accepted the write (must be none); elsewhere the
		// reconcile has no API effect and its local record is not fenced by the API server.
		var victimLocal, victimWriterRecs int
		for _, r := range recs {
			if r.Shard != victim.Name || r.Start < at.UnixNano() {
				continue
			}
			if isWriter[r.Namespace] {
				victimWriterRecs++
			} else {
				victimLocal++
			}
		}
		var overlapsOthers, overlapsWriters, overlapsLocal int
		for _, o := range auditlog.Overlaps(recs) {
			switch {
			case o.A.Shard != victim.Name && o.B.Shard != victim.Name:
				overlapsOthers++
			case isWriter[o.Namespace]:
				overlapsWriters++
			default:
				overlapsLocal++
			}
		}
		detect := -1.0
		if !seized.IsZero() {
			detect = seized.Sub(at).Seconds()
		}
		b.Logf("SIGSTOP of %s, one of %d shards (%d of %d namespaces, %d of them with %s), and its coordinator connection cut:",
			victim.Name, n, len(victimNS), len(nss), len(writers), writeConfigMap)
		b.Logf("  coordinator seized it %.3fs after the stop; its namespaces reconciled by the other shards after: p50 %.3fs, max %.3fs",
			detect, exact(per, 0.5), took.Seconds())
		b.Logf("  resumed (SIGCONT) %.3fs after the stop; its own lease ended (kshard_shard_fenced=1) %.3fs after the stop",
			resumed.Sub(at).Seconds(), leaseEnd.Sub(at).Seconds())
		b.Logf("  its writes after the stop: %.0f refused by the API server, %.0f refused by its own gate, %.0f accepted, %.0f other errors (kshard_audit_writes_total)",
			writes(audit.WriteRefusedByAPIServer), writes(audit.WriteRefusedByShard), writes(audit.WriteAccepted), writes(audit.WriteError))
		b.Logf("  API server: %.0f requests denied by the fence policy %s meanwhile (apiserver_validating_admission_policy_check_total, all clients: the coordinator's probes count too); "+
			"its gate refused %.0f writes of any controller (kshard_shard_refused_writes_total)", denied1-denied0, policy, gateRefused)
		b.Logf("  every controller of the victim, API writes after its last scrape (ms before the stop) by response code (kshard_rest_client_requests_total): %v; accepted (2xx): %.0f",
			writesByCode, anyAccepted)
		b.Logf("  stored writes of the victim (watch on %s): %d sent after the stop (late, accepted: must be 0), %d landed after the stop in all",
			writeConfigMap, lateAccepted, landedAfterStop)
		b.Logf("  audit records of the victim after the stop: %d in writer namespaces (written only for accepted writes: must be 0), %d local-only elsewhere (no API effect)",
			victimWriterRecs, victimLocal)
		b.Logf("  overlaps: %d between the other shards (must be 0), %d in writer namespaces (must be 0), %d of the victim's local-only reconciles in its remaining lease",
			overlapsOthers, overlapsWriters, overlapsLocal)
		reportCoordinatorWindow(b, mCoordBefore, mCoordAfter)
		usage.log(b, "from the SIGSTOP until the last namespace was reconciled elsewhere")
		b.ReportMetric(took.Seconds(), "recovery-max-s")
		b.ReportMetric(exact(per, 0.5), "recovery-p50-s")
		b.ReportMetric(detect, "seize-s")
		b.ReportMetric(writes(audit.WriteRefusedByAPIServer), "late-writes-refused-apiserver")
		b.ReportMetric(writes(audit.WriteRefusedByShard), "late-writes-refused-shard")
		b.ReportMetric(float64(lateAccepted), "late-writes-accepted")
		b.ReportMetric(writesByCode["403"], "late-writes-403-all-controllers")
		b.ReportMetric(anyAccepted, "late-writes-2xx-all-controllers")
		b.ReportMetric(denied1-denied0, "fence-denials")
		b.ReportMetric(float64(overlapsOthers+overlapsWriters), "overlaps")
		// anyAccepted is not a failure by itself: a write answered between the last scrape
		// and the stop (milliseconds) counts there too.
		if lateAccepted > 0 || victimWriterRecs > 0 || overlapsOthers+overlapsWriters > 0 {
			b.Errorf("the API server accepted late writes of %s: %d stored, %d audit records, %d overlaps", victim.Name, lateAccepted, victimWriterRecs, overlapsOthers+overlapsWriters)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Writes observed on the objects

type observedWrite struct {
	namespace string
	shard     string
	sent      time.Time // the writer's clock, from the annotation
	seen      time.Time // when the watch delivered it
}

// writesWatch records every stored change of a writeConfigMap.
type writesWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	writes []observedWrite
	err    error
}

// watchWrites lists the writeConfigMaps and watches them from there on, watching again
// from the last resourceVersion seen whenever the API server ends a watch (it does after
// its --min-request-timeout), so that no stored write is missed.
func watchWrites(b *testing.B, e *env) *writesWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sel := metav1.ListOptions{FieldSelector: "metadata.name=" + writeConfigMap}
	l, err := e.client.CoreV1().ConfigMaps("").List(ctx, sel)
	if err != nil {
		b.Fatal(err)
	}
	w := &writesWatch{cancel: cancel, done: make(chan struct{})}
	rv := l.ResourceVersion
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			opts := sel
			opts.ResourceVersion, opts.AllowWatchBookmarks = rv, true
			wi, err := e.client.CoreV1().ConfigMaps("").Watch(ctx, opts)
			if err != nil {
				if ctx.Err() == nil {
					w.fail(fmt.Errorf("watch from %s: %w", rv, err))
				}
				return
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						break // stopped by stop(): the stream ends with the cancellation
					}
					w.fail(fmt.Errorf("watch from %s: %v", rv, apierrors.FromObject(ev.Object)))
					wi.Stop()
					return
				}
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				rv = cm.ResourceVersion
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					w.add(cm)
				}
			}
			wi.Stop()
		}
	}()
	return w
}

func (w *writesWatch) add(cm *corev1.ConfigMap) {
	shard, sent, ok := strings.Cut(cm.Annotations[audit.WriteAnnotation], " ")
	if !ok {
		return
	}
	ns, err := strconv.ParseInt(sent, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.writes = append(w.writes, observedWrite{namespace: cm.Namespace, shard: shard, sent: time.Unix(0, ns), seen: time.Now()})
	w.mu.Unlock()
}

func (w *writesWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *writesWatch) stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

// namespacesWrittenBy counts the namespaces with a stored write of shard sent at or
// after since.
func (w *writesWatch) namespacesWrittenBy(shard string, since time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, x := range w.writes {
		if x.shard == shard && !x.sent.Before(since) {
			seen[x.namespace] = true
		}
	}
	return len(seen)
}

// byShard counts shard's stored writes sent after t, and those the watch delivered after
// t whenever they were sent; err is the watch's failure, if it failed (its counts are
// then incomplete).
func (w *writesWatch) byShard(shard string, t time.Time) (sentAfter, seenAfter int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.writes {
		if x.shard != shard {
			continue
		}
		if x.sent.After(t) {
			sentAfter++
		}
		if x.seen.After(t) {
			seenAfter++
		}
	}
	return sentAfter, seenAfter, w.err
}

// ---------------------------------------------------------------------------------------
// Audit logs, read as they grow

// auditTail reads the audit logs of a cluster incrementally: each poll parses only the
// lines appended since the last one. At 10,000 namespaces the logs grow by hundreds of
// records a second, and parsing them whole every 200ms costs the benchmark process the
// CPU that the shards being timed need.
type auditTail struct {
	dir     string
	offsets map[string]int64
	// first is the first reconcile start per namespace and shard seen since skip.
	first map[string]map[string]time.Time
}

func newAuditTail(dir string) *auditTail {
	return &auditTail{dir: dir, offsets: map[string]int64{}, first: map[string]map[string]time.Time{}}
}

// skip moves past everything written so far.
func (t *auditTail) skip(b testing.TB) {
	b.Helper()
	files, err := filepath.Glob(filepath.Join(t.dir, "*.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		t.offsets[f] = fileSize(b, f)
	}
	t.first = map[string]map[string]time.Time{}
}

// poll reads the complete lines appended since the last poll.
func (t *auditTail) poll() error {
	files, err := filepath.Glob(filepath.Join(t.dir, "*.jsonl"))
	if err != nil {
		return err
	}
	for _, path := range files {
		if err := t.pollFile(path); err != nil {
			return err
		}
	}
	return nil
}

func (t *auditTail) pollFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	off := t.offsets[path]
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	// Only up to the last newline: a line being written is read next time.
	end := strings.LastIndexByte(string(data), '\n')
	if end < 0 {
		return nil
	}
	for _, line := range strings.Split(string(data[:end]), "\n") {
		var r auditlog.Record
		if json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		byShard := t.first[r.Namespace]
		if byShard == nil {
			byShard = map[string]time.Time{}
			t.first[r.Namespace] = byShard
		}
		st := time.Unix(0, r.Start)
		if cur, ok := byShard[r.Shard]; !ok || st.Before(cur) {
			byShard[r.Shard] = st
		}
	}
	t.offsets[path] = off + int64(end) + 1
	return nil
}

// firstBy returns when a shard of live first started reconciling ns at or after since.
func (t *auditTail) firstBy(ns string, since time.Time, live map[string]bool) (time.Time, bool) {
	var best time.Time
	for shard, at := range t.first[ns] {
		if live[shard] && !at.Before(since) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	return best, !best.IsZero()
}

// waitAllReconciled waits until a shard of live reconciled every namespace of nss since
// `since`, and returns how long after since the last one was first reconciled.
func (t *auditTail) waitAllReconciled(b testing.TB, what string, since time.Time, nss []string, live map[string]bool) time.Duration {
	b.Helper()
	var worst time.Duration
	framework.Eventually(b, waitLimit, what+": every namespace reconciled by a live shard", func(context.Context) (bool, error) {
		if err := t.poll(); err != nil {
			return false, err
		}
		worst = 0
		missing := 0
		for _, ns := range nss {
			at, ok := t.firstBy(ns, since, live)
			if !ok {
				missing++
				continue
			}
			worst = max(worst, at.Sub(since))
		}
		if missing > 0 {
			return false, fmt.Errorf("%d of %d namespaces not reconciled yet", missing, len(nss))
		}
		return true, nil
	})
	return worst
}

// perNamespace returns, in seconds, how long after since a shard of live first
// reconciled each namespace of nss (those never reconciled left out).
func (t *auditTail) perNamespace(since time.Time, nss []string, live map[string]bool) []float64 {
	var out []float64
	for _, ns := range nss {
		if at, ok := t.firstBy(ns, since, live); ok {
			out = append(out, at.Sub(since).Seconds())
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------
// What bounded a run: load and CPU

// loadMeter records what the machine and the processes of a cluster spent over a window:
// the load average, the CPU seconds of the coordinator and each shard (from /proc), and
// the API server's (its process_cpu_seconds_total).
type loadMeter struct {
	e       *env
	c       *cluster
	start   time.Time
	load0   string
	cpu0    map[string]float64
	apiCPU0 float64
}

type usageReport struct {
	window       time.Duration
	load0, load1 string
	cpu          map[string]float64
	apiCPU       float64
}

func startLoad(b testing.TB, e *env, c *cluster) *loadMeter {
	b.Helper()
	return &loadMeter{e: e, c: c, start: time.Now(), load0: loadAvg(), cpu0: clusterCPU(c), apiCPU0: apiserverCPU(e)}
}

func (m *loadMeter) stop(b testing.TB) usageReport {
	b.Helper()
	r := usageReport{window: time.Since(m.start), load0: m.load0, load1: loadAvg(), cpu: map[string]float64{}}
	for name, v := range clusterCPU(m.c) {
		if v0, ok := m.cpu0[name]; ok {
			r.cpu[name] = v - v0
		}
	}
	r.apiCPU = apiserverCPU(m.e) - m.apiCPU0
	return r
}

func (r usageReport) log(b testing.TB, what string) {
	names := make([]string, 0, len(r.cpu))
	for n := range r.cpu {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, r.cpu[n]))
	}
	b.Logf("  CPU seconds %s (%.1fs): kube-apiserver %.2f; %s; load average %s -> %s (2 cores)",
		what, r.window.Seconds(), r.apiCPU, strings.Join(parts, ", "), r.load0, r.load1)
}

// loadAvg returns the 1-, 5- and 15-minute load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// clusterCPU reads the CPU seconds of the cluster's running processes by name.
func clusterCPU(c *cluster) map[string]float64 {
	out := map[string]float64{}
	procs := []struct {
		name string
		p    *framework.Process
	}{{"coordinator", c.coord.Process}}
	for _, s := range c.shards {
		procs = append(procs, struct {
			name string
			p    *framework.Process
		}{strings.TrimPrefix(s.Name, c.prefix+"-"), s.Process})
	}
	for _, p := range procs {
		if p.p.Exited() {
			continue
		}
		if u, err := framework.ReadProcUsage(p.p.Pid()); err == nil {
			out[p.name] = u.CPUSeconds
		}
	}
	return out
}

// apiserverCPU is the API server's process_cpu_seconds_total (NaN if unreadable).
func apiserverCPU(e *env) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := e.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1
	}
	return framework.ParseMetrics(string(body)).Value("process_cpu_seconds_total")
}

// reportCoordinatorWindow logs what the coordinator's metrics say about a failover
// window: the owner record's batches, their write and enforce times, and the moves'
// handoff durations and ownership gaps.
func reportCoordinatorWindow(b testing.TB, before, after framework.Samples) {
	d := func(name string) float64 { return after.Value(name) - before.Value(name) }
	hist := func(name string) string {
		h := buckets(after, name).sub(buckets(before, name))
		return fmt.Sprintf("n %.0f, p50 %.3fs, p99 %.3fs, sum %.3fs %s", h.count(), h.quantile(0.5), h.quantile(0.99), d(name+"_sum"), h)
	}
	b.Logf("  coordinator in the window: owner record %.0f batches, %.0f record writes, %.0f errors; batch write %s; enforce %s",
		d("kshard_coordinator_owner_record_batches_total"), d("kshard_coordinator_owner_record_object_writes_total"), d("kshard_coordinator_owner_record_errors_total"),
		hist("kshard_coordinator_owner_record_write_seconds"), hist("kshard_coordinator_owner_record_enforce_seconds"))
	b.Logf("  coordinator in the window: handoff %s; ownership gap %s; %.0f shard messages rejected",
		hist("kshard_coordinator_handoff_duration_seconds"), hist("kshard_coordinator_ownership_gap_seconds"), d("kshard_coordinator_rejected_messages_total"))
}
