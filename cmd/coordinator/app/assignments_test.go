package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
)

// TestGetBoundsTheAnswer: the assignments subcommand reads at most maxAnswerBytes, so a
// wrong --server cannot make it buffer without bound.
func TestGetBoundsTheAnswer(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		status  int
		wantErr string
	}{
		{name: "normal answer", size: 1 << 10, status: http.StatusOK},
		{name: "exactly the limit", size: maxAnswerBytes, status: http.StatusOK},
		{name: "over the limit", size: maxAnswerBytes + 1, status: http.StatusOK, wantErr: "larger than"},
		{name: "error status", size: 10, status: http.StatusServiceUnavailable, wantErr: "503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(strings.Repeat("x", tt.size)))
			}))
			defer srv.Close()
			body, err := get(srv.URL + "/assignments")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("get() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(body) != tt.size {
				t.Fatalf("get() = %d bytes, %v; want %d bytes", len(body), err, tt.size)
			}
		})
	}
}

// TestPrintAssignments: what the subcommand prints for a person, with and without
// placement by load's fields.
func TestPrintAssignments(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want []string
		not  []string
	}{
		{name: "owner, not pinned", v: coordinatorrpc.Owner{Namespace: "a", Partition: 3, Shard: "s0", State: "owned", Epoch: "1.2", PartitionLoad: 12.5, PartitionObjects: 40, PartitionNamespaces: 2},
			want: []string{"namespace a is in partition 3, owned by s0 (owned, epoch 1.2)", "partition load 12.5 req/s, 40 cached objects, 2 namespaces\n"},
			not:  []string{"pinned", "cooling"}},
		{name: "owner, pinned and cooling", v: coordinatorrpc.Owner{Namespace: "a", Cooling: true, PinnedTo: "hot", PinSource: "annotation: a", PinState: "unsatisfied"},
			want: []string{"owned by (nobody yet)", "cooling (not moved for load)", `pinned to group "hot" by annotation: a: unsatisfied`}, not: []string{"hot (its shard"}},
		{name: "owner of a hot partition", v: coordinatorrpc.Owner{Namespace: "a", Shard: "s0", PartitionLoad: 50, Hot: true},
			want: []string{"partition load 50 req/s, 0 cached objects, 0 namespaces, hot (load rounds move the other partitions with a namespace off its shard)\n"}},
		{name: "assignments by count", v: coordinatorrpc.Assignments{Term: 2, PartitionCount: 8, Placement: "count", Shards: []coordinatorrpc.ShardView{{Shard: "s0", Partitions: 8}}},
			want: []string{"placement count", "LOAD", "s0  "}, not: []string{"pinned partitions", "SHARE", "EXCLUSIVE", "SUSPECT", "SATURATED", "LIMITER WAIT", "PARTITION  OWNER", "no partition costs"}},
		{name: "assignments by load: share, exclusive, suspect, saturated, limiter wait", v: coordinatorrpc.Assignments{Placement: "load",
			Shards: []coordinatorrpc.ShardView{{Shard: "s0", Load: 50, LoadShare: 0.625, Exclusive: true, Saturated: true, LimiterWaitPermille: 4200},
				{Shard: "s1", Load: 30, LoadShare: 0.375, Suspect: true}}},
			want: []string{"SHARD  GROUP  PARTITIONS  NAMESPACES  LOAD  SHARE  EXCLUSIVE  SUSPECT  SATURATED  LIMITER WAIT (‰)  CACHED OBJECTS",
				"s0     -      0           0           50    62.5%  true       false    true       4200              0",
				"s1     -      0           0           30    37.5%  false      true     false      0                 0"},
			not: []string{"PARTITION  OWNER"}},
		{name: "--loads by load", v: coordinatorrpc.Assignments{Placement: "load", Shards: []coordinatorrpc.ShardView{{Shard: "s0"}},
			Loads: []coordinatorrpc.PartitionLoadView{
				{Partition: 5, Owner: "s0", Cost: 50.2, Load: 50, Namespaces: 2, Objects: 40, Hot: true, LastMove: "membership"},
				{Partition: 9, Cost: 3, Load: 3, Namespaces: 1, Objects: 7, Pin: "hot", LastMove: ""}}},
			want: []string{"PARTITION  OWNER  COST  LOAD  NAMESPACES  OBJECTS  HOT    PIN  LAST MOVE",
				"5          s0     50.2  50    2           40       true   -    membership\n9          -      3     3     1           7        false  hot  -\n"}},
		{name: "--loads by load, nothing costs yet", v: coordinatorrpc.Assignments{Placement: "load", Loads: []coordinatorrpc.PartitionLoadView{}},
			want: []string{"no partition carries a cost yet"}, not: []string{"PARTITION  OWNER"}},
		{name: "--loads by count", v: coordinatorrpc.Assignments{Placement: "count", Loads: []coordinatorrpc.PartitionLoadView{}},
			want: []string{"no partition costs: placement count does not place by cost"}, not: []string{"PARTITION  OWNER"}},
		{name: "assignments by load", v: coordinatorrpc.Assignments{Placement: "load", Namespaces: 40, PinsByState: map[string]int{"unsatisfied": 1},
			Shards: []coordinatorrpc.ShardView{{Shard: "s0", Load: 3.25}}},
			want: []string{"placement load", "namespaces 40, pinned partitions by state map[unsatisfied:1]", "3.25"}, not: []string{"PINNED PARTITION"}},
		{name: "assignments with groups and pins", v: coordinatorrpc.Assignments{Placement: "load", PinsByState: map[string]int{"satisfied": 1, "conflict": 1},
			Shards: []coordinatorrpc.ShardView{{Shard: "s0"}, {Shard: "s1", Group: "hot"}},
			Pins: []coordinatorrpc.PinView{{Partition: 5, Group: "hot", Source: "annotation: a", State: "satisfied", Owner: "s1", InGroup: true},
				{Partition: 9, Source: "flag: b (hot), flag (cold)", State: "conflict", Owner: "s0"}}},
			want: []string{"SHARD  GROUP", "s0     -", "s1     hot", "PINNED PARTITION", "5                 hot    satisfied  s1     true      annotation: a",
				"9                 -      conflict   s0     false     flag: b (hot), flag (cold)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			switch v := tt.v.(type) {
			case coordinatorrpc.Owner:
				printOwner(&b, v)
			case coordinatorrpc.Assignments:
				printAssignments(&b, v)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output:\n%s\nlacks %q", b.String(), w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("output:\n%s\nhas %q", b.String(), w)
				}
			}
		})
	}
}

// TestAssignmentsLoadsFlag: --loads asks the coordinator for ?loads=true and prints the
// costliest partitions after the shards; --json prints the answer as it came; --loads does
// not go with --namespace.
func TestAssignmentsLoadsFlag(t *testing.T) {
	answer := coordinatorrpc.Assignments{Placement: "load", Shards: []coordinatorrpc.ShardView{{Shard: "s0", LoadShare: 1}},
		Loads: []coordinatorrpc.PartitionLoadView{{Partition: 3, Owner: "s0", Cost: 7, Load: 7, Namespaces: 1, LastMove: "load"}}}
	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantQuery string // "" for no request
		want      []string
		not       []string
	}{
		{name: "without --loads", args: nil, wantQuery: "/assignments", want: []string{"SHARE"}, not: []string{"PARTITION  OWNER"}},
		{name: "--loads", args: []string{"--loads"}, wantQuery: "/assignments?loads=true",
			want: []string{"s0     -      0           0           0     100.0%", "PARTITION  OWNER  COST", "3          s0     7     7     1           0        false  -    load"}},
		{name: "--loads --json", args: []string{"--loads", "--json"}, wantQuery: "/assignments?loads=true", want: []string{`"lastMove":"load"`}},
		{name: "--loads with --namespace", args: []string{"--loads", "--namespace", "a"}, wantCode: 2, want: []string{"does not go with --namespace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = append(got, r.URL.RequestURI())
				a := answer
				if r.URL.Query().Get("loads") != "true" { // as the coordinator answers
					a.Loads = nil
				}
				_ = json.NewEncoder(w).Encode(a)
			}))
			defer srv.Close()
			var stdout, stderr strings.Builder
			code := assignments(append([]string{"--server", srv.URL}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; stderr %s", code, tt.wantCode, stderr.String())
			}
			if want := []string{tt.wantQuery}; tt.wantQuery == "" && len(got) != 0 || tt.wantQuery != "" && !slices.Equal(got, want) {
				t.Fatalf("requests %q, want %q", got, tt.wantQuery)
			}
			out := stdout.String() + stderr.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output:\n%s\nlacks %q", out, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("output:\n%s\nhas %q", out, w)
				}
			}
		})
	}
}
