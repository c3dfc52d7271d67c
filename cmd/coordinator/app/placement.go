package app

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

// Placement modes (--placement).
const (
	// PlacementCount places partitions by count (every shard within ⌊P/N⌋–⌈P/N⌉), as
	// before issue 31: the default until placement by load has been measured, and the
	// escape hatch after.
	PlacementCount = string(handoff.PlacementCount)
	// PlacementLoad places partitions by cost: reported load plus a base per namespace
	// (docs/design-placement.md §2).
	PlacementLoad = string(handoff.PlacementLoad)
)

// MinBalanceReports is how many load reports a --balance-interval spans at least: a round
// must follow a fresh report of every member. The flags' defaults are handoff's
// (handoff.DefaultBalanceInterval and the others) and balance's, so that the flags and the
// state machine cannot drift apart.
const MinBalanceReports = 2

// PlacementOptions are the flags of placement by load and of pins.
type PlacementOptions struct {
	Mode             string
	Balance          bool
	Interval         time.Duration
	Warmup           time.Duration
	Cooldown         time.Duration
	Params           balance.Params
	MaxPartitionLoad float64
	MaxShardLoad     float64
	SaturationWait   float64
	// Pins, PartitionPins and AnnotationGroups are --pin, --pin-partition and
	// --pin-annotation-groups as given; Validate parses them.
	Pins             []string
	PartitionPins    []string
	AnnotationGroups []string
	// SharedGroups is --shard-group-shared: the shard groups that also take unpinned
	// partitions (balance.Params.SharedGroups); every other group is dedicated.
	SharedGroups []string
}

// NewPlacementOptions returns the defaults: placement by count, balancing on once
// placement by load is chosen.
func NewPlacementOptions() PlacementOptions {
	return PlacementOptions{Mode: PlacementCount, Balance: true, Interval: handoff.DefaultBalanceInterval, Warmup: handoff.DefaultBalanceWarmup,
		Cooldown: handoff.DefaultBalanceCooldown, MaxPartitionLoad: handoff.DefaultMaxPartitionLoad, MaxShardLoad: handoff.DefaultMaxShardLoad,
		SaturationWait: handoff.DefaultSaturationWait,
		Params: balance.Params{Margin: balance.DefaultMargin, MaxMoves: balance.DefaultMaxMoves, MaxCostFraction: balance.DefaultMaxCostFraction,
			MaxObjects: balance.DefaultMaxObjects, MaxNamespaceShare: balance.DefaultMaxNamespaceShare, MinLoad: balance.DefaultMinLoad,
			SaturationFactor: balance.DefaultSaturationFactor}}
}

// AddFlags registers the flags.
func (o *PlacementOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "placement", o.Mode, `how partitions are placed on shards: "count" (every shard within one partition of the average) or "load" `+
		`(by cost: the load shards report plus a base per namespace, from a Namespace informer of the coordinator's own; pins need it)`)
	fs.BoolVar(&o.Balance, "balance", o.Balance, "with --placement=load: also move partitions for load every --balance-interval (hot partitions alone, pins, spread); "+
		"false places by cost only when shards join or leave")
	fs.DurationVar(&o.Interval, "balance-interval", o.Interval, "time between two balancer rounds (at least 2 × --load-report-interval)")
	fs.DurationVar(&o.Warmup, "balance-warmup", o.Warmup, "time after a coordinator starts leading before its first balancer round")
	fs.DurationVar(&o.Cooldown, "balance-cooldown", o.Cooldown, "a partition moved for load less than this ago is not moved for load again (partitions given for membership or a pin do not cool; after a failover, partitions cool by their reported age)")
	fs.Float64Var(&o.Params.Margin, "balance-margin", o.Params.Margin, "δ: a round moves partitions while the busiest shard's cost exceeds the fair share × (1 + δ); a partition above the fair share × (1 − δ) is hot, placed alone (one already alone stays hot down to × (1 − 2δ)); from 0 to 1, both excluded")
	fs.IntVar(&o.Params.MaxMoves, "balance-max-moves", o.Params.MaxMoves, "most partitions one balancer round moves")
	fs.Float64Var(&o.Params.MaxCostFraction, "balance-max-cost-fraction", o.Params.MaxCostFraction, "most cost one balancer round moves, as a fraction of the total (above 0, at most 1)")
	fs.Uint64Var(&o.Params.MaxObjects, "balance-max-objects", o.Params.MaxObjects, "most cached objects the moves of one balancer round warm (a moved partition's objects count twice)")
	fs.Float64Var(&o.Params.MaxNamespaceShare, "balance-max-namespace-share", o.Params.MaxNamespaceShare, "no shard is given partitions beyond this × the average namespaces per shard (+8): "+
		"the bound a shard that under-reports its load cannot get around; at least 1, +Inf for none")
	fs.Float64Var(&o.Params.MinLoad, "balance-min-load", o.Params.MinLoad, "no partition is moved for load while the busiest shard's cost is at most this (requests/s): idle clusters do not shuffle")
	fs.Float64Var(&o.MaxPartitionLoad, "balance-max-partition-load", o.MaxPartitionLoad, "a load report entry above this (requests/s) is absurd: dropped and counted")
	fs.Float64Var(&o.MaxShardLoad, "balance-max-shard-load", o.MaxShardLoad, "a load report summing above this (requests/s) is absurd: dropped whole and counted")
	fs.Float64Var(&o.SaturationWait, "balance-saturation-wait", o.SaturationWait, "a shard whose controller clients wait this long in their rate limiters (seconds per second, "+
		"the shard's last load report), and twice as long as the median shard, is saturated: its load is below its demand, so the balancer counts its partitions --balance-saturation-factor × their cost and moves no load onto it; above 0")
	fs.Float64Var(&o.Params.SaturationFactor, "balance-saturation-factor", o.Params.SaturationFactor, "what a saturated shard's partitions count, × their cost (see --balance-saturation-wait); "+
		"from 1 (never) to 10")
	fs.StringArrayVar(&o.Pins, "pin", o.Pins, "namespace=group: place the namespace's partition (and the namespaces that hash with it) on the shard group's shards; repeatable; needs --placement=load")
	fs.StringArrayVar(&o.PartitionPins, "pin-partition", o.PartitionPins, "id=group: place the partition on the shard group's shards (the cluster partition included); repeatable; needs --placement=load")
	fs.StringSliceVar(&o.AnnotationGroups, "pin-annotation-groups", o.AnnotationGroups, "shard groups a Namespace's "+placement.Annotation+
		" annotation may pin its partition to (any other value is ignored and counted): whoever may update a Namespace can take these groups' capacity; needs --placement=load")
	fs.StringSliceVar(&o.SharedGroups, "shard-group-shared", o.SharedGroups, "shard groups (a shard's --shard-group) whose shards also take unpinned partitions; "+
		"every other group is dedicated: only the partitions pinned to it go there (with no shard outside dedicated groups, every group takes unpinned ones). "+
		"A pinned partition held outside its group moves there at a --balance round; with --balance=false only when its shard leaves. Needs --placement=load")
}

// validate reports every bad flag of the block; partitions is --partitions (already
// checked) and reportInterval the interval shards report at (reportCadence).
func (o PlacementOptions) validate(partitions int, reportInterval time.Duration) error {
	var errs []error
	load := o.Mode == PlacementLoad
	switch o.Mode {
	case PlacementCount, PlacementLoad:
	default:
		errs = append(errs, fmt.Errorf("--placement=%q: want %q or %q", o.Mode, PlacementCount, PlacementLoad))
	}
	if load && o.Balance && reportInterval == 0 {
		errs = append(errs, errors.New("--placement=load with --balance needs load reports (--load-report-interval above 0), or --balance=false"))
	}
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--balance-interval=%s must be positive", o.Interval))
	} else if load && o.Balance && reportInterval > 0 && o.Interval < MinBalanceReports*reportInterval {
		errs = append(errs, fmt.Errorf("--balance-interval=%s must be at least %d × --load-report-interval (%s): a round must follow a fresh report of every shard",
			o.Interval, MinBalanceReports, MinBalanceReports*reportInterval))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--balance-warmup=%s must not be negative", o.Warmup))
	}
	if o.Cooldown < 0 {
		errs = append(errs, fmt.Errorf("--balance-cooldown=%s must not be negative", o.Cooldown))
	}
	p := o.Params
	if m := p.Margin; !(m > 0 && m < 1) {
		errs = append(errs, fmt.Errorf("--balance-margin=%v must be above 0 and below 1", m))
	}
	if p.MaxMoves < 1 {
		errs = append(errs, fmt.Errorf("--balance-max-moves=%d must be at least 1", p.MaxMoves))
	}
	if f := p.MaxCostFraction; !(f > 0 && f <= 1) {
		errs = append(errs, fmt.Errorf("--balance-max-cost-fraction=%v must be above 0 and at most 1", f))
	}
	if p.MaxObjects < 1 {
		errs = append(errs, fmt.Errorf("--balance-max-objects=%d must be at least 1", p.MaxObjects))
	}
	if s := p.MaxNamespaceShare; !(s >= 1) {
		errs = append(errs, fmt.Errorf("--balance-max-namespace-share=%v must be at least 1 (+Inf for no cap)", s))
	}
	if l := p.MinLoad; !(l > 0) || math.IsInf(l, 0) {
		errs = append(errs, fmt.Errorf("--balance-min-load=%v must be a finite number above 0", l))
	}
	if l := o.MaxPartitionLoad; !(l > 0) || math.IsInf(l, 0) {
		errs = append(errs, fmt.Errorf("--balance-max-partition-load=%v must be a finite number above 0", l))
	}
	if l := o.MaxShardLoad; !(l > 0) || math.IsInf(l, 0) {
		errs = append(errs, fmt.Errorf("--balance-max-shard-load=%v must be a finite number above 0", l))
	} else if o.MaxPartitionLoad > 0 && l < o.MaxPartitionLoad {
		errs = append(errs, fmt.Errorf("--balance-max-shard-load=%v must not be below --balance-max-partition-load=%v: a shard may hold one partition at the most", l, o.MaxPartitionLoad))
	}
	if w := o.SaturationWait; !(w > 0) || math.IsInf(w, 0) {
		errs = append(errs, fmt.Errorf("--balance-saturation-wait=%v must be a finite number above 0", w))
	}
	if f := p.SaturationFactor; !(f >= 1 && f <= balance.MaxSaturationFactor) {
		errs = append(errs, fmt.Errorf("--balance-saturation-factor=%v must be from 1 to %d", f, balance.MaxSaturationFactor))
	}
	rules, err := o.rules(partitions)
	if err != nil {
		errs = append(errs, err)
	}
	for _, g := range o.AnnotationGroups {
		if err := placement.ValidateGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("--pin-annotation-groups: %w", err))
		}
	}
	for _, g := range o.SharedGroups {
		if err := placement.ValidateGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("--shard-group-shared: %w", err))
		}
	}
	if !rules.Empty() && !load {
		errs = append(errs, errors.New("--pin, --pin-partition and --pin-annotation-groups need --placement=load: placement by count has no pins"))
	}
	if len(o.SharedGroups) > 0 && !load {
		errs = append(errs, errors.New("--shard-group-shared needs --placement=load: placement by count has no groups (every shard takes its share)"))
	}
	if pm, err := partition.NewMap(partitions); err == nil {
		errs = append(errs, placement.FlagConflicts(pm, rules)...)
	}
	return errors.Join(errs...)
}

// balanceConfig is the state machine's handoff.Config.Balance from the flags.
func (o PlacementOptions) balanceConfig() handoff.BalanceConfig {
	p := o.Params
	p.SharedGroups = slices.Clone(o.SharedGroups)
	return handoff.BalanceConfig{Placement: handoff.Placement(o.Mode), Enabled: o.Balance, Interval: o.Interval, Warmup: o.Warmup,
		Cooldown: o.Cooldown, MaxPartitionLoad: o.MaxPartitionLoad, MaxShardLoad: o.MaxShardLoad,
		SaturationWait: o.SaturationWait, Params: p}
}

// rules parses the pin flags for partitions partitions.
func (o PlacementOptions) rules(partitions int) (placement.Rules, error) {
	ns, err1 := placement.ParseNamespacePins("pin", o.Pins)
	parts, err2 := placement.ParsePartitionPins("pin-partition", o.PartitionPins, partitions)
	return placement.Rules{Namespaces: ns, Partitions: parts, AnnotationGroups: o.AnnotationGroups}, errors.Join(err1, err2)
}
