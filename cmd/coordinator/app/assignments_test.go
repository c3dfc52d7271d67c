package app

import (
	"net/http"
	"net/http/httptest"
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
			want: []string{"owned by (nobody yet)", "cooling (not moved for load)", `pinned to group "hot" by annotation: a: unsatisfied`}},
		{name: "assignments by count", v: coordinatorrpc.Assignments{Term: 2, PartitionCount: 8, Placement: "count", Shards: []coordinatorrpc.ShardView{{Shard: "s0", Partitions: 8}}},
			want: []string{"placement count", "LOAD", "s0  "}, not: []string{"pinned partitions"}},
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
