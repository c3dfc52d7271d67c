package endpointstress

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/framework"
)

const (
	// syncsMetric is the EndpointSlice controller's count of its syncs by result (success,
	// stale, error), under upstream's name in each shard's /metrics.
	syncsMetric = "endpoint_slice_controller_syncs"
	// probeAnnotation is written on every Service after the churn, so that each is
	// synced once more with nothing to change.
	probeAnnotation = "kshard.io/endpoint-stress-probe"
	// syncQuiet is how long after the probe's syncs no sync may fail: it covers the first
	// retries of a failed sync (1s, 2s, 4s: the controller's backoff).
	syncQuiet = 15 * time.Second
)

// syncCounts are one shard's syncs by result.
type syncCounts struct{ success, stale, errors float64 }

func (c syncCounts) total() float64 { return c.success + c.stale + c.errors }

func (c syncCounts) String() string {
	return fmt.Sprintf("success %.0f, stale %.0f, error %.0f", c.success, c.stale, c.errors)
}

// shardSyncs are the live shards' syncs, by shard.
type shardSyncs map[string]syncCounts

func (s shardSyncs) total() (n float64) {
	for _, c := range s {
		n += c.total()
	}
	return n
}

func (s shardSyncs) String() string {
	var parts []string
	for name, c := range s {
		parts = append(parts, name+": "+c.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// scrapeSyncs reads endpoint_slice_controller_syncs from every live shard's /metrics.
func scrapeSyncs(ctx context.Context, k *framework.KShard) (shardSyncs, error) {
	out := shardSyncs{}
	for name, s := range k.Shards {
		if s.Exited() {
			continue
		}
		m, err := framework.Scrape(ctx, s.HTTPURL)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		of := `shard="` + name + `"`
		out[name] = syncCounts{
			success: m.Value(syncsMetric, `result="success"`, of),
			stale:   m.Value(syncsMetric, `result="stale"`, of),
			errors:  m.Value(syncsMetric, `result="error"`, of),
		}
	}
	return out, nil
}

// grownErrors lists the shards whose failed syncs grew from before to now, and those of
// before that exited or restarted (their counters fell: the counts cannot be compared).
func grownErrors(before, now shardSyncs) []string {
	var out []string
	for name, b := range before {
		n, ok := now[name]
		switch {
		case !ok:
			out = append(out, name+" exited")
		case n.total() < b.total() || n.errors < b.errors:
			out = append(out, fmt.Sprintf("%s restarted (syncs %.0f, then %.0f)", name, b.total(), n.total()))
		case n.errors > b.errors:
			out = append(out, fmt.Sprintf("%s failed %.0f syncs", name, n.errors-b.errors))
		}
	}
	sort.Strings(out)
	return out
}

// checkSyncErrors checks that no live shard's EndpointSlice controller fails a sync once
// the churn has ended and its last changes are shown. Failed syncs are expected while
// namespaces move (a write refused by the fence, a conflict with the previous owner's
// write), so the count is taken at the drain; from then on it must not grow. With no
// change left to make, a controller syncs only what it retries, so the check first makes
// every Service synced once more (probeAnnotation): a shard that keeps failing syncs fails
// some of them or their retries within syncQuiet, while the slices, already right, would
// pass every other check.
func checkSyncErrors(t *testing.T, cs kubernetes.Interface, k *framework.KShard, models []*nsModel) {
	t.Helper()
	if k == nil {
		t.Logf("failed syncs: not checked in the reference run (no shard's /metrics)")
		return
	}
	ctx := context.Background()
	atDrain, err := scrapeSyncs(ctx, k)
	if err != nil {
		t.Errorf("the shards' %s after the drain: %v", syncsMetric, err)
		return
	}
	t.Logf("%s of the live shards after the drain: %s", syncsMetric, atDrain)

	services := 0
	for _, m := range models {
		services += len(m.svcs)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, probeAnnotation))
	if err := framework.Parallel(len(models), 8, func(i int) error {
		for _, s := range models[i].svcs {
			if _, err := cs.CoreV1().Services(models[i].ns).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("annotating Service %s/%s: %w", models[i].ns, s.name, err)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("the sync probe: %v", err)
		return
	}
	probed := time.Now()
	// Every Service synced again: as many more syncs as Services, at least (nothing else
	// syncs now but retries).
	var last shardSyncs
	err = framework.Poll(time.Minute, func(ctx context.Context) (bool, error) {
		now, err := scrapeSyncs(ctx, k)
		if err != nil {
			return false, err
		}
		last = now
		if n := now.total() - atDrain.total(); n < float64(services) {
			return false, fmt.Errorf("%.0f syncs since the drain, want %d (one per Service) at least", n, services)
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the %d Services annotated after the drain not synced again: %v; %s: %s", services, err, syncsMetric, last)
		return
	}
	synced := time.Since(probed)
	// Then no failed sync for syncQuiet. The wait is for what must not come, so it ends
	// early at the first failed sync and its timeout is the window; the last scrape decides.
	_ = framework.Poll(syncQuiet, func(ctx context.Context) (bool, error) {
		now, err := scrapeSyncs(ctx, k)
		if err != nil {
			return false, err
		}
		return len(grownErrors(atDrain, now)) > 0, nil
	})
	final, err := scrapeSyncs(ctx, k)
	if err != nil {
		t.Errorf("the shards' %s at the end of the window: %v", syncsMetric, err)
		return
	}
	if grown := grownErrors(atDrain, final); len(grown) > 0 {
		t.Errorf("syncs failed after the drain (a controller still failing once the churn ended): %s; %s: %s",
			strings.Join(grown, ", "), syncsMetric, final)
		return
	}
	t.Logf("%s after the probe (%d Services annotated, synced again within %s) and %s more: %s; no sync failed after the drain",
		syncsMetric, services, synced.Round(100*time.Millisecond), syncQuiet, final)
}

// TestGrownErrors checks what the sync check counts as failed syncs after the drain.
func TestGrownErrors(t *testing.T) {
	before := shardSyncs{"shard-2": {success: 90, errors: 3}, "shard-5": {success: 200, stale: 4, errors: 7}}
	tests := []struct {
		name string
		now  shardSyncs
		want []string
	}{
		{name: "more syncs, no more errors", now: shardSyncs{"shard-2": {success: 150, errors: 3}, "shard-5": {success: 300, stale: 5, errors: 7}}},
		{name: "a new shard's errors are not compared", now: shardSyncs{"shard-2": before["shard-2"], "shard-5": before["shard-5"], "shard-6": {errors: 1}}},
		{name: "errors grew", now: shardSyncs{"shard-2": before["shard-2"], "shard-5": {success: 210, stale: 4, errors: 9}}, want: []string{"shard-5 failed 2 syncs"}},
		{name: "a shard exited", now: shardSyncs{"shard-5": before["shard-5"]}, want: []string{"shard-2 exited"}},
		{name: "a shard restarted", now: shardSyncs{"shard-2": {success: 5}, "shard-5": before["shard-5"]},
			want: []string{"shard-2 restarted (syncs 93, then 5)"}},
		{name: "a shard restarted and failed as many", now: shardSyncs{"shard-2": {success: 1, errors: 3}, "shard-5": {success: 200, stale: 4, errors: 7}},
			want: []string{"shard-2 restarted (syncs 93, then 4)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := grownErrors(before, tc.now)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("grownErrors = %q, want %q", got, tc.want)
			}
		})
	}
}
