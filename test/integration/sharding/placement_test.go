package sharding

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
	"github.com/kshard/kshard/test/framework"
)

// placementPartitions is small enough that namespaces share partitions (the counts are
// then more than 0 or 1) and large enough that the test finds namespaces of distinct ones.
const placementPartitions = 64

// TestPlacementByLoad runs coordinators with --placement=load against the control plane:
// with and without the fence (the owner labeler's Namespace informer, or one of the
// coordinator's own), the leader's /assignments counts the namespaces of every partition
// as the API server lists them, shows a --pin and pins by allowed annotations (and an
// annotation added while it runs), ignores and counts an annotation naming a group not
// allowed, and the pin gauges say so; with no shard every pin is unsatisfied. Without the
// fence a shard then takes every partition under placement by load, and its cost counts
// its namespaces; a shard of group "hot" (--shard-group, dedicated) then takes the
// partitions pinned to hot, by the flag and by the annotation, and nothing else, and
// /assignments shows those pins satisfied.
func TestPlacementByLoad(t *testing.T) {
	f := framework.Get(t)
	pm, err := partition.NewMap(placementPartitions)
	if err != nil {
		t.Fatal(err)
	}
	// Test namespaces: a pinned one by flag, one annotated with an allowed group, one
	// with a group not allowed, one annotated later, one annotated with the group a shard
	// runs in later; each in a partition of its own.
	var nss []string
	used := map[partition.ID]bool{}
	for len(nss) < 5 {
		ns := f.Namespace(t, nil).Name
		if p := pm.For(ns); !used[p] {
			used[p] = true
			nss = append(nss, ns)
		}
	}
	flagged, annotated, refused, later, hotAnnotated := nss[0], nss[1], nss[2], nss[3], nss[4]
	annotate(t, f, annotated, "warm")
	annotate(t, f, refused, "cold")
	annotate(t, f, hotAnnotated, "hot")
	// Load rounds (which move a pinned partition held outside its group) every 2s from the
	// start, on reports every second.
	args := []string{"--placement=load", "--pin=" + flagged + "=hot", "--pin-annotation-groups=warm,hot",
		"--balance-warmup=1s", "--balance-interval=2s", "--load-report-interval=1s", "--load-half-life=3s"}
	laterAnnotated := false // by the first subtest, when it runs

	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("fence=%v", fence), func(t *testing.T) {
			k := f.NewKShard(t, framework.KShardOptions{Partitions: placementPartitions, SessionTTL: ttl, Margin: margin,
				PodIdentity: fence, Fence: fence, CoordinatorArgs: args, ShardGroups: map[string]string{"shard-hot": "hot"}})
			k.StartCoordinator("coordinator-a")
			var leader *framework.Coordinator
			framework.Eventually(t, 60*time.Second, "the leader counts every namespace of every test partition", func(ctx context.Context) (bool, error) {
				l, err := k.Leader(ctx)
				if err != nil {
					return false, err
				}
				leader = l
				return countsMatch(ctx, f, pm, l, nss)
			})
			want := map[string]struct{ group, source string }{
				flagged:      {"hot", "flag: " + flagged},
				annotated:    {"warm", "annotation: " + annotated},
				hotAnnotated: {"hot", "annotation: " + hotAnnotated},
				refused:      {},
			}
			if laterAnnotated {
				want[later] = struct{ group, source string }{"warm", "annotation: " + later}
			}
			for ns, w := range want {
				o := owner(t, leader, ns)
				state := ""
				if w.group != "" {
					// No shard yet: every pin is unsatisfied.
					state = placement.StateUnsatisfied
				}
				if o.PinnedTo != w.group || o.PinSource != w.source || o.PinState != state {
					t.Errorf("%s: pinned to %q by %q (%s), want %q by %q (%s)", ns, o.PinnedTo, o.PinSource, o.PinState, w.group, w.source, state)
				}
			}
			pins := float64(len(want) - 1)
			framework.Eventually(t, 30*time.Second, "the pin gauges", func(ctx context.Context) (bool, error) {
				s, err := framework.Scrape(ctx, leader.HTTPURL)
				if err != nil {
					return false, err
				}
				unsatisfied := s.Value("kshard_coordinator_pins", `state="unsatisfied"`)
				notAllowed := s.Value("kshard_coordinator_pin_annotations_ignored", `reason="not_allowed"`)
				if unsatisfied != pins || notAllowed != 1 {
					return false, fmt.Errorf("pins{unsatisfied} = %v (want %v), pin_annotations_ignored{not_allowed} = %v (want 1)", unsatisfied, pins, notAllowed)
				}
				return true, nil
			})
			if fence {
				return
			}

			annotate(t, f, later, "warm")
			laterAnnotated = true
			framework.Eventually(t, 30*time.Second, "the annotation added is a pin", func(ctx context.Context) (bool, error) {
				o, err := k.NamespaceOwner(ctx, later)
				if err != nil {
					return false, err
				}
				if o.PinnedTo != "warm" || o.PinSource != "annotation: "+later {
					return false, fmt.Errorf("pinned to %q by %q", o.PinnedTo, o.PinSource)
				}
				return true, nil
			})

			k.StartShard("shard-1")
			k.WaitAllOwned(t, 90*time.Second)
			framework.Eventually(t, 30*time.Second, "the shard's cost counts its namespaces", func(ctx context.Context) (bool, error) {
				a, err := leader.Assignments(ctx)
				if err != nil {
					return false, err
				}
				if len(a.Shards) != 1 || a.Shards[0].Partitions != placementPartitions {
					return false, fmt.Errorf("shards %+v", a.Shards)
				}
				// cost = load + λ·namespaces with λ ≥ balance.LambdaMin = 0.001.
				if min := 0.001 * float64(a.Namespaces); a.Namespaces == 0 || a.Shards[0].Load < min*0.999 {
					return false, fmt.Errorf("shard load %v for %d namespaces, want at least %v", a.Shards[0].Load, a.Namespaces, min)
				}
				v, err := framework.Metric(ctx, leader.HTTPURL, "kshard_coordinator_shard_load", `shard="shard-1"`)
				if err != nil || v <= 0 {
					return false, fmt.Errorf("kshard_coordinator_shard_load = %v, %v", v, err)
				}
				return true, nil
			})

			// A shard of group hot: the partitions pinned to hot move to it (by load
			// rounds, a pin at a time within the round's cost budget), and nothing else.
			start := time.Now()
			k.StartShard("shard-hot")
			hotPins := []string{flagged, hotAnnotated}
			framework.Eventually(t, 30*time.Second, "the partitions pinned to hot are on shard-hot, the pins satisfied", func(ctx context.Context) (bool, error) {
				a, err := leader.Assignments(ctx)
				if err != nil {
					return false, err
				}
				for _, sv := range a.Shards {
					if sv.Shard == "shard-hot" && (sv.Group != "hot" || sv.Partitions != len(hotPins)) {
						return false, fmt.Errorf("shard-hot in group %q owns %d partitions, want hot and %d", sv.Group, sv.Partitions, len(hotPins))
					}
				}
				for _, ns := range hotPins {
					o, err := ownerOf(ctx, leader, ns)
					if err != nil {
						return false, err
					}
					if o.Shard != "shard-hot" || o.State != "owned" || o.PinState != placement.StateSatisfied {
						return false, fmt.Errorf("%s: partition %d %s by %q, pin %s", ns, o.Partition, o.State, o.Shard, o.PinState)
					}
				}
				for _, pv := range a.Pins {
					if pv.Group == "hot" && (pv.State != placement.StateSatisfied || pv.Owner != "shard-hot" || !pv.InGroup) {
						return false, fmt.Errorf("pin %+v", pv)
					}
				}
				if want := map[string]int{placement.StateSatisfied: 2, placement.StateUnsatisfied: 2, placement.StateConflict: 0}; fmt.Sprint(a.PinsByState) != fmt.Sprint(want) {
					return false, fmt.Errorf("pins by state %v, want %v", a.PinsByState, want)
				}
				return true, nil
			})
			t.Logf("the hot pins on shard-hot %s after it started", time.Since(start).Round(time.Millisecond))
		})
	}
}

// countsMatch compares the leader's namespace counts with the API server's list: in
// total and for the partition of each of nss.
func countsMatch(ctx context.Context, f *framework.Framework, pm partition.Map, l *framework.Coordinator, nss []string) (bool, error) {
	list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	per := make([]uint32, pm.Count)
	for _, ns := range list.Items {
		per[pm.For(ns.Name)]++
	}
	a, err := l.Assignments(ctx)
	if err != nil {
		return false, err
	}
	if a.Placement != "load" || a.Namespaces != uint64(len(list.Items)) {
		return false, fmt.Errorf("placement %q, %d namespaces counted, the API server lists %d", a.Placement, a.Namespaces, len(list.Items))
	}
	for _, ns := range nss {
		o, err := ownerOf(ctx, l, ns)
		if err != nil {
			return false, err
		}
		if want := per[pm.For(ns)]; o.Partition != uint32(pm.For(ns)) || o.PartitionNamespaces != want {
			return false, fmt.Errorf("%s: partition %d with %d namespaces, want %d with %d", ns, o.Partition, o.PartitionNamespaces, pm.For(ns), want)
		}
	}
	return true, nil
}

func ownerOf(ctx context.Context, l *framework.Coordinator, ns string) (coordinatorrpc.Owner, error) {
	var o coordinatorrpc.Owner
	code, body, err := framework.HTTPGet(ctx, l.HTTPURL+"/assignments?namespace="+ns)
	if err != nil {
		return o, err
	}
	if code != http.StatusOK {
		return o, fmt.Errorf("GET /assignments?namespace=%s: %d %s", ns, code, body)
	}
	return o, json.Unmarshal(body, &o)
}

func owner(t *testing.T, l *framework.Coordinator, ns string) coordinatorrpc.Owner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := ownerOf(ctx, l, ns)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// annotate sets the pin annotation of a namespace.
func annotate(t *testing.T, f *framework.Framework, ns, group string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, placement.Annotation, group)
	if _, err := f.Client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
