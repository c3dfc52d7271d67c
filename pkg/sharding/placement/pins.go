package placement

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Annotation is the Namespace annotation that pins the namespace's partition to a shard
// group. It is honoured only for the groups in Rules.AnnotationGroups: whoever may
// update a Namespace could otherwise take a dedicated group's capacity.
const Annotation = "kshard.io/shard-group"

// Pin states, as the kshard_coordinator_pins{state} gauge and /assignments spell them.
const (
	// StateSatisfied: pinned to a group that has a live member.
	StateSatisfied = "satisfied"
	// StateUnsatisfied: pinned to a group with no live member; the partition is placed
	// in the default domain instead (availability over pinning).
	StateUnsatisfied = "unsatisfied"
	// StateConflict: two sources pin the partition to different groups; it is unpinned
	// while they do.
	StateConflict = "conflict"
)

// Reasons an annotation is ignored (Inputs.Ignored).
const (
	// IgnoredInvalid: the annotation's value is not a DNS-1123 label.
	IgnoredInvalid = "invalid"
	// IgnoredNotAllowed: the group is not in --pin-annotation-groups.
	IgnoredNotAllowed = "not_allowed"
)

// Rules are the operator's pins and what annotations may pin to.
type Rules struct {
	// Namespaces pins a namespace's partition to a group (--pin namespace=group).
	Namespaces map[string]string
	// Partitions pins a partition to a group (--pin-partition id=group).
	Partitions map[partition.ID]string
	// AnnotationGroups are the groups a Namespace's Annotation may name
	// (--pin-annotation-groups); an annotation naming any other group is ignored.
	AnnotationGroups []string
}

// Empty reports whether no pin can come from these rules: no flag pin, and no group an
// annotation may name.
func (r Rules) Empty() bool {
	return len(r.Namespaces) == 0 && len(r.Partitions) == 0 && len(r.AnnotationGroups) == 0
}

// Namespace is what Resolve needs of one Namespace: its name and its Annotation.
type Namespace struct {
	Name string
	// Group is the Annotation's value; Annotated says whether it is present at all (an
	// empty value is present and invalid).
	Group     string
	Annotated bool
}

// Pin is one partition's pin.
type Pin struct {
	// Group is the group the partition is pinned to; "" when Conflict.
	Group string
	// Source says where the pin comes from: "flag" (--pin-partition), "flag: <namespace>"
	// (--pin), "annotation: <namespace>" (the first namespace by name when several agree).
	// For a conflict it names both sides.
	Source string
	// Conflict: two sources pin the partition to different groups, so it is unpinned.
	Conflict bool
}

// Inputs are the placement inputs of every partition.
type Inputs struct {
	// Namespaces is each partition's namespace count (one entry per partition).
	Namespaces []uint32
	// Pins holds the pinned and the conflicting partitions only: at most one entry per
	// partition, so bounded by the partition count whatever the namespaces.
	Pins map[partition.ID]Pin
	// Ignored counts the annotations ignored, by reason (IgnoredInvalid,
	// IgnoredNotAllowed). Both keys are always present.
	Ignored map[string]int
}

// PinTable returns the state machine's pin table (handoff.Coordinator.SetPins): count
// entries, the group of each pinned partition and "" elsewhere (conflicts included); nil
// when no partition is pinned.
func (in Inputs) PinTable(count int) []string {
	var out []string
	for p, pin := range in.Pins {
		if pin.Conflict || pin.Group == "" || int(p) >= count {
			continue
		}
		if out == nil {
			out = make([]string, count)
		}
		out[p] = pin.Group
	}
	return out
}

// Conflicts returns the conflicting partitions, by ID.
func (in Inputs) Conflicts() []partition.ID {
	var out []partition.ID
	for p, pin := range in.Pins {
		if pin.Conflict {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// State returns the pin state of partition p given the groups that have a live member:
// "" when p is not pinned.
func (in Inputs) State(p partition.ID, groups map[string]bool) string {
	pin, ok := in.Pins[p]
	switch {
	case !ok:
		return ""
	case pin.Conflict:
		return StateConflict
	case groups[pin.Group]:
		return StateSatisfied
	}
	return StateUnsatisfied
}

// States counts the partitions by pin state (every state present, 0 included).
func (in Inputs) States(groups map[string]bool) map[string]int {
	out := map[string]int{StateSatisfied: 0, StateUnsatisfied: 0, StateConflict: 0}
	for p := range in.Pins {
		out[in.State(p, groups)]++
	}
	return out
}

type candidate struct {
	group, source, name string
}

// Resolve counts the namespaces of every partition of pm and resolves the pins:
//
//   - A flag pin (Rules.Namespaces, Rules.Partitions) pins its partition; annotations in
//     a partition a flag pins are not looked at (the flag wins).
//   - Otherwise an Annotation pins its namespace's partition when its value is a DNS-1123
//     label in Rules.AnnotationGroups; any other value is ignored and counted.
//   - Sources of one partition that name different groups are a conflict: the partition
//     is unpinned, and Pin.Source names two of them.
//
// The result does not depend on the order of namespaces.
func Resolve(pm partition.Map, r Rules, namespaces []Namespace) Inputs {
	in := Inputs{Namespaces: make([]uint32, pm.Count), Pins: map[partition.ID]Pin{},
		Ignored: map[string]int{IgnoredInvalid: 0, IgnoredNotAllowed: 0}}
	allowed := make(map[string]bool, len(r.AnnotationGroups))
	for _, g := range r.AnnotationGroups {
		allowed[g] = true
	}
	flags := map[partition.ID][]candidate{}
	for p, g := range r.Partitions {
		if int(p) < pm.Count {
			flags[p] = append(flags[p], candidate{group: g, source: "flag", name: ""})
		}
	}
	for ns, g := range r.Namespaces {
		p := pm.For(ns)
		flags[p] = append(flags[p], candidate{group: g, source: "flag: " + ns, name: ns})
	}
	annotations := map[partition.ID][]candidate{}
	for _, ns := range namespaces {
		p := pm.For(ns.Name)
		in.Namespaces[p]++
		if !ns.Annotated {
			continue
		}
		switch {
		case ValidateGroup(ns.Group) != nil:
			in.Ignored[IgnoredInvalid]++
		case !allowed[ns.Group]:
			in.Ignored[IgnoredNotAllowed]++
		case len(flags[p]) == 0:
			annotations[p] = append(annotations[p], candidate{group: ns.Group, source: "annotation: " + ns.Name, name: ns.Name})
		}
	}
	for p, cs := range flags {
		in.Pins[p] = decide(cs)
	}
	for p, cs := range annotations {
		in.Pins[p] = decide(cs)
	}
	return in
}

// decide turns one partition's sources into its pin: the first by name when all name
// one group, else a conflict naming the first source and the first that disagrees with it.
func decide(cs []candidate) Pin {
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	first := cs[0]
	for _, c := range cs[1:] {
		if c.group != first.group {
			return Pin{Conflict: true, Source: fmt.Sprintf("%s (%s), %s (%s)", first.source, first.group, c.source, c.group)}
		}
	}
	return Pin{Group: first.group, Source: first.source}
}

// ValidateGroup checks a shard group's name: a DNS-1123 label, as the Deployment's label
// value and the Hello field carry it.
func ValidateGroup(g string) error {
	if msgs := validation.IsDNS1123Label(g); len(msgs) > 0 {
		return fmt.Errorf("group %q: %s", g, strings.Join(msgs, "; "))
	}
	return nil
}

// ParseNamespacePins parses --pin values, namespace=group. A namespace given twice must
// name one group.
func ParseNamespacePins(flag string, values []string) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, v := range values {
		ns, g, ok := strings.Cut(v, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("--%s=%q: want namespace=group", flag, v))
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--%s=%q: namespace %q: %s", flag, v, ns, strings.Join(msgs, "; ")))
			continue
		}
		if err := ValidateGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("--%s=%q: %w", flag, v, err))
			continue
		}
		if prev, dup := out[ns]; dup && prev != g {
			errs = append(errs, fmt.Errorf("--%s: namespace %q pinned to both %q and %q", flag, ns, prev, g))
			continue
		}
		out[ns] = g
	}
	return out, errors.Join(errs...)
}

// ParsePartitionPins parses --pin-partition values, id=group, for count partitions. A
// partition given twice must name one group.
func ParsePartitionPins(flag string, values []string, count int) (map[partition.ID]string, error) {
	out := map[partition.ID]string{}
	var errs []error
	for _, v := range values {
		id, g, ok := strings.Cut(v, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("--%s=%q: want partition=group", flag, v))
			continue
		}
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || (count > 0 && n >= uint64(count)) {
			errs = append(errs, fmt.Errorf("--%s=%q: partition %q is not a number from 0 to %d (--partitions − 1)", flag, v, id, count-1))
			continue
		}
		if err := ValidateGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("--%s=%q: %w", flag, v, err))
			continue
		}
		p := partition.ID(n)
		if prev, dup := out[p]; dup && prev != g {
			errs = append(errs, fmt.Errorf("--%s: partition %d pinned to both %q and %q", flag, p, prev, g))
			continue
		}
		out[p] = g
	}
	return out, errors.Join(errs...)
}

// FlagConflicts returns, for the flag pins alone, one error per partition they pin to
// different groups (the --pin of two namespaces that hash together, or a --pin and a
// --pin-partition): such flags can only ever conflict, so the coordinator refuses them
// rather than run with the partition unpinned.
func FlagConflicts(pm partition.Map, r Rules) []error {
	in := Resolve(pm, Rules{Namespaces: r.Namespaces, Partitions: r.Partitions}, nil)
	var errs []error
	for _, p := range in.Conflicts() {
		errs = append(errs, fmt.Errorf("--pin/--pin-partition pin partition %d to different groups: %s", p, in.Pins[p].Source))
	}
	return errs
}
