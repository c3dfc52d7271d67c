package shardcache

import (
	"runtime"
	"slices"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func TestAdmissionSet(t *testing.T) {
	a := newAdmission(func(ns string) partition.ID { return partition.ID(len(ns)) })
	if got := a.update([]partition.ID{3, 64, 3, partition.MaxCount - 1}, true); !slices.Equal(got, []partition.ID{3, 64, partition.MaxCount - 1}) {
		t.Fatalf("admit changed %v", got)
	}
	for p, want := range map[partition.ID]bool{0: false, 3: true, 63: false, 64: true, 65: false, partition.MaxCount - 1: true, partition.MaxCount: false, 1 << 31: false} {
		if a.admitted(p) != want {
			t.Errorf("admitted(%d) = %v, want %v", p, !want, want)
		}
	}
	if !a.namespaceAdmitted("abc") || a.namespaceAdmitted("ab") {
		t.Error("namespaceAdmitted does not go through partitionOf")
	}
	if got := a.update([]partition.ID{3}, true); got != nil {
		t.Errorf("admitting an admitted partition changed %v", got)
	}
	if got := a.update([]partition.ID{64, 5, 1 << 31}, false); !slices.Equal(got, []partition.ID{64}) {
		t.Errorf("revoke changed %v", got)
	}
	if got := a.list(); !slices.Equal(got, []partition.ID{3, partition.MaxCount - 1}) {
		t.Errorf("list = %v", got)
	}
}

// A first assignment admits the default 4096 partitions one Prepare at a time. With a
// copy-on-write map that allocated O(P²), about 390 MB; the bitset copies P/8 bytes.
func TestAdmissionFirstAssignmentAllocations(t *testing.T) {
	a := newAdmission(func(string) partition.ID { return 0 })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for p := partition.ID(0); p < partition.DefaultCount; p++ {
		a.update([]partition.ID{p}, true)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("admitting %d partitions one by one allocated %d bytes, want < 8 MiB", partition.DefaultCount, got)
	}
	if n := len(a.list()); n != partition.DefaultCount {
		t.Errorf("%d admitted, want %d", n, partition.DefaultCount)
	}
}
