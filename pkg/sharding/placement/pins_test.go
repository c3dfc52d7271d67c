package placement

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// sameAndOther returns two namespace names of one partition and one of another, found by
// hashing (the map is fixed, so this is deterministic).
func sameAndOther(t *testing.T, pm partition.Map) (a, b, other string) {
	t.Helper()
	a = "ns-0"
	for i := 1; i < 1000; i++ {
		n := fmt.Sprintf("ns-%d", i)
		if pm.For(n) == pm.For(a) && b == "" {
			b = n
		}
		if pm.For(n) != pm.For(a) && other == "" {
			other = n
		}
	}
	if b == "" || other == "" {
		t.Fatal("no colliding or distinct namespace names found")
	}
	return a, b, other
}

func TestResolve(t *testing.T) {
	pm, err := partition.NewMap(8)
	if err != nil {
		t.Fatal(err)
	}
	a, b, other := sameAndOther(t, pm)
	pa, po := pm.For(a), pm.For(other)
	ann := func(name, group string) Namespace { return Namespace{Name: name, Group: group, Annotated: true} }
	plain := func(name string) Namespace { return Namespace{Name: name} }
	tests := []struct {
		name        string
		rules       Rules
		namespaces  []Namespace
		wantPins    map[partition.ID]Pin
		wantIgnored map[string]int
	}{
		{
			name:       "no pins: counts only",
			namespaces: []Namespace{plain(a), plain(b), plain(other)},
			wantPins:   map[partition.ID]Pin{},
		},
		{
			name:       "flag pin of a namespace pins its partition, even when the namespace does not exist",
			rules:      Rules{Namespaces: map[string]string{"absent": "hot"}},
			namespaces: []Namespace{plain(a)},
			wantPins:   map[partition.ID]Pin{pm.For("absent"): {Group: "hot", Source: "flag: absent"}},
		},
		{
			name:     "partition flag",
			rules:    Rules{Partitions: map[partition.ID]string{3: "hot"}},
			wantPins: map[partition.ID]Pin{3: {Group: "hot", Source: "flag"}},
		},
		{
			name:     "partition flag beyond the count is dropped",
			rules:    Rules{Partitions: map[partition.ID]string{8: "hot"}},
			wantPins: map[partition.ID]Pin{},
		},
		{
			name:       "annotation of an allowed group",
			rules:      Rules{AnnotationGroups: []string{"hot"}},
			namespaces: []Namespace{ann(other, "hot"), plain(a)},
			wantPins:   map[partition.ID]Pin{po: {Group: "hot", Source: "annotation: " + other}},
		},
		{
			name:        "annotation of a group not allowed is ignored and counted",
			rules:       Rules{AnnotationGroups: []string{"hot"}},
			namespaces:  []Namespace{ann(other, "cold")},
			wantPins:    map[partition.ID]Pin{},
			wantIgnored: map[string]int{IgnoredNotAllowed: 1},
		},
		{
			name:        "invalid annotation values are ignored and counted, empty included",
			rules:       Rules{AnnotationGroups: []string{"hot"}},
			namespaces:  []Namespace{ann(a, "Hot!"), ann(other, "")},
			wantPins:    map[partition.ID]Pin{},
			wantIgnored: map[string]int{IgnoredInvalid: 2},
		},
		{
			name:       "the flag wins over an annotation of its partition",
			rules:      Rules{Namespaces: map[string]string{a: "flagged"}, AnnotationGroups: []string{"hot"}},
			namespaces: []Namespace{ann(b, "hot")},
			wantPins:   map[partition.ID]Pin{pa: {Group: "flagged", Source: "flag: " + a}},
		},
		{
			name:       "annotations that agree: the first namespace by name is the source",
			rules:      Rules{AnnotationGroups: []string{"hot"}},
			namespaces: []Namespace{ann(b, "hot"), ann(a, "hot")},
			wantPins:   map[partition.ID]Pin{pa: {Group: "hot", Source: "annotation: " + min(a, b)}},
		},
		{
			name:       "annotations that disagree: conflict, unpinned",
			rules:      Rules{AnnotationGroups: []string{"hot", "warm"}},
			namespaces: []Namespace{ann(a, "hot"), ann(b, "warm")},
			wantPins: map[partition.ID]Pin{pa: {Conflict: true,
				Source: fmt.Sprintf("annotation: %s (hot), annotation: %s (warm)", a, b)}},
		},
		{
			name:     "flags that disagree: conflict",
			rules:    Rules{Namespaces: map[string]string{a: "hot"}, Partitions: map[partition.ID]string{pa: "warm"}},
			wantPins: map[partition.ID]Pin{pa: {Conflict: true, Source: fmt.Sprintf("flag (warm), flag: %s (hot)", a)}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Resolve(pm, tc.rules, tc.namespaces)
			if !reflect.DeepEqual(got.Pins, tc.wantPins) {
				t.Errorf("pins = %+v, want %+v", got.Pins, tc.wantPins)
			}
			want := map[string]int{IgnoredInvalid: 0, IgnoredNotAllowed: 0}
			for k, v := range tc.wantIgnored {
				want[k] = v
			}
			if !reflect.DeepEqual(got.Ignored, want) {
				t.Errorf("ignored = %v, want %v", got.Ignored, want)
			}
			counts := make([]uint32, pm.Count)
			for _, ns := range tc.namespaces {
				counts[pm.For(ns.Name)]++
			}
			if !reflect.DeepEqual(got.Namespaces, counts) {
				t.Errorf("namespaces = %v, want %v", got.Namespaces, counts)
			}
			// Order does not matter.
			rev := make([]Namespace, len(tc.namespaces))
			for i, ns := range tc.namespaces {
				rev[len(rev)-1-i] = ns
			}
			if again := Resolve(pm, tc.rules, rev); !reflect.DeepEqual(again, got) {
				t.Errorf("reversed input gives %+v, want %+v", again, got)
			}
		})
	}
}

func TestPinTableAndStates(t *testing.T) {
	in := Inputs{Pins: map[partition.ID]Pin{
		1: {Group: "hot", Source: "flag"},
		2: {Group: "", Conflict: true, Source: "x"},
		3: {Group: "warm", Source: "flag"},
	}}
	tests := []struct {
		name       string
		in         Inputs
		groups     map[string]bool
		wantTable  []string
		wantStates map[string]int
	}{
		{name: "nothing pinned", in: Inputs{}, wantTable: nil,
			wantStates: map[string]int{StateSatisfied: 0, StateUnsatisfied: 0, StateConflict: 0}},
		{name: "only members without a group", in: in, groups: map[string]bool{"": true},
			wantTable:  []string{"", "hot", "", "warm"},
			wantStates: map[string]int{StateSatisfied: 0, StateUnsatisfied: 2, StateConflict: 1}},
		{name: "a group with a member", in: in, groups: map[string]bool{"": true, "hot": true},
			wantTable:  []string{"", "hot", "", "warm"},
			wantStates: map[string]int{StateSatisfied: 1, StateUnsatisfied: 1, StateConflict: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.PinTable(4); !reflect.DeepEqual(got, tc.wantTable) {
				t.Errorf("PinTable = %q, want %q", got, tc.wantTable)
			}
			if got := tc.in.States(tc.groups); !reflect.DeepEqual(got, tc.wantStates) {
				t.Errorf("States = %v, want %v", got, tc.wantStates)
			}
		})
	}
	if got := in.Conflicts(); !reflect.DeepEqual(got, []partition.ID{2}) {
		t.Errorf("Conflicts = %v, want [2]", got)
	}
}

func TestParsePins(t *testing.T) {
	tests := []struct {
		name      string
		ns, parts []string
		wantNS    map[string]string
		wantParts map[partition.ID]string
		wantErrs  []string // substrings, one per expected error
	}{
		{name: "none", wantNS: map[string]string{}, wantParts: map[partition.ID]string{}},
		{name: "valid", ns: []string{"team-a=hot", "team-a=hot"}, parts: []string{"7=hot", "0=warm"},
			wantNS: map[string]string{"team-a": "hot"}, wantParts: map[partition.ID]string{7: "hot", 0: "warm"}},
		{name: "malformed", ns: []string{"team-a", "Team=hot", "a=Hot"}, parts: []string{"x=hot", "8=hot", "-1=hot", "3"},
			wantNS: map[string]string{}, wantParts: map[partition.ID]string{},
			wantErrs: []string{`--pin="team-a": want namespace=group`, `--pin="Team=hot": namespace "Team"`, `--pin="a=Hot": group "Hot"`,
				`--pin-partition="x=hot": partition "x"`, `--pin-partition="8=hot": partition "8" is not a number from 0 to 7`,
				`--pin-partition="-1=hot"`, `--pin-partition="3": want partition=group`}},
		{name: "two groups for one key", ns: []string{"a=hot", "a=warm"}, parts: []string{"1=hot", "1=warm"},
			wantNS: map[string]string{"a": "hot"}, wantParts: map[partition.ID]string{1: "hot"},
			wantErrs: []string{`--pin: namespace "a" pinned to both "hot" and "warm"`, `--pin-partition: partition 1 pinned to both "hot" and "warm"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns, err1 := ParseNamespacePins("pin", tc.ns)
			parts, err2 := ParsePartitionPins("pin-partition", tc.parts, 8)
			if !reflect.DeepEqual(ns, tc.wantNS) || !reflect.DeepEqual(parts, tc.wantParts) {
				t.Errorf("got %v %v, want %v %v", ns, parts, tc.wantNS, tc.wantParts)
			}
			var msg string
			for _, e := range []error{err1, err2} {
				if e != nil {
					msg += e.Error() + "\n"
				}
			}
			if got := strings.Count(strings.TrimSpace(msg), "\n") + 1; msg == "" && len(tc.wantErrs) > 0 || msg != "" && got != len(tc.wantErrs) {
				t.Errorf("errors:\n%s\nwant %d", msg, len(tc.wantErrs))
			}
			for _, w := range tc.wantErrs {
				if !strings.Contains(msg, w) {
					t.Errorf("errors:\n%s\nlack %q", msg, w)
				}
			}
		})
	}
}

func TestFlagConflicts(t *testing.T) {
	pm, err := partition.NewMap(8)
	if err != nil {
		t.Fatal(err)
	}
	a, b, other := sameAndOther(t, pm)
	tests := []struct {
		name  string
		rules Rules
		want  int
	}{
		{name: "none", rules: Rules{Namespaces: map[string]string{a: "hot", other: "warm"}}},
		{name: "two namespaces of one partition agree", rules: Rules{Namespaces: map[string]string{a: "hot", b: "hot"}}},
		{name: "two namespaces of one partition disagree", rules: Rules{Namespaces: map[string]string{a: "hot", b: "warm"}}, want: 1},
		{name: "namespace and partition disagree", rules: Rules{Namespaces: map[string]string{a: "hot"},
			Partitions: map[partition.ID]string{pm.For(a): "warm", pm.For(other): "x"}}, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FlagConflicts(pm, tc.rules); len(got) != tc.want {
				t.Errorf("FlagConflicts = %v, want %d errors", got, tc.want)
			}
		})
	}
}
