package ring

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// hasher adapts xxhash to consistent.Hasher, as the ring hashes.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// member adapts a shard name to consistent.Member.
type member string

func (m member) String() string { return string(m) }

// weakHasher keeps only a few bits of xxhash so virtual nodes collide
// often, which exercises the library's "last added wins" rule.
type weakHasher struct{ mask uint64 }

func (h weakHasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) & h.mask }

// libraryOwners is what the ring used to compute: the library itself, fed
// the sorted, de-duplicated names in one consistent.New.
// It returns nil where the library panics for lack of room.
func libraryOwners(names []string, cfg Config, h consistent.Hasher) (owners []string) {
	defer func() {
		if recover() != nil {
			owners = nil
		}
	}()
	list := make([]consistent.Member, len(names))
	for i, n := range names {
		list[i] = member(n)
	}
	c := consistent.New(list, consistent.Config{Hasher: h, PartitionCount: cfg.PartitionCount,
		ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load})
	out := make([]string, cfg.PartitionCount)
	for p := range out {
		out[p] = c.GetPartitionOwner(p).String()
	}
	return out
}

// TestDistributeMatchesLibrary proves the one-sort reimplementation gives
// the library's assignment partition for partition, so leaders of builds
// before and after it agree and a leader change moves nothing.
func TestDistributeMatchesLibrary(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		n    int
		mask uint64 // 0: full xxhash
		// wantErr: collisions leave too few members on the ring; the
		// library panics and the ring must return ErrNotEnoughRoom.
		wantErr bool
	}{
		{name: "defaults, 1 member", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 1},
		{name: "defaults, 7 members", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 7},
		{name: "defaults, 64 members", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 64},
		{name: "defaults, 150 members", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 150},
		{name: "more members than partitions", cfg: Config{PartitionCount: 61, ReplicationFactor: 10, Load: 1}, n: 80},
		{name: "load one, divisible", cfg: Config{PartitionCount: 64, ReplicationFactor: 20, Load: 1}, n: 8},
		{name: "sim shape", cfg: Config{PartitionCount: 48, ReplicationFactor: 20, Load: 1.25}, n: 12},
		{name: "colliding virtual nodes", cfg: Config{PartitionCount: 256, ReplicationFactor: 50, Load: 1.1}, n: 20, mask: 0x3ff},
		{name: "heavily colliding virtual nodes", cfg: Config{PartitionCount: 97, ReplicationFactor: 30, Load: 1.5}, n: 9, mask: 0x3f},
		{name: "members left without a virtual node: no room", cfg: Config{PartitionCount: 97, ReplicationFactor: 30, Load: 1.1}, n: 9, mask: 0x7, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := make([]string, tt.n)
			for i := range names {
				names[i] = fmt.Sprintf("kshard-shard-%d", i)
			}
			slices.Sort(names)
			var lib consistent.Hasher = hasher{}
			sum := xxhash.Sum64
			if tt.mask != 0 {
				w := weakHasher{mask: tt.mask}
				lib, sum = w, w.Sum64
			}
			owner, err := distribute(names, tt.cfg, sum)
			want := libraryOwners(names, tt.cfg, lib)
			if tt.wantErr {
				if !errors.Is(err, ErrNotEnoughRoom) || want != nil {
					t.Fatalf("distribute error = %v, library panicked = %v; want ErrNotEnoughRoom and a panic", err, want == nil)
				}
				return
			}
			if err != nil || want == nil {
				t.Fatalf("distribute error = %v, library panicked = %v", err, want == nil)
			}
			for p, m := range owner {
				if names[m] != want[p] {
					t.Fatalf("partition %d: ring %s, library %s", p, names[m], want[p])
				}
			}
		})
	}
}

// TestAssignSliceMatchesLibrary checks the public path (sorting, dedup,
// xxhash) against the library for unsorted input with duplicates.
func TestAssignSliceMatchesLibrary(t *testing.T) {
	r, err := New(Config{PartitionCount: 4096})
	if err != nil {
		t.Fatal(err)
	}
	in := []string{"c", "a", "b", "a", "shard-9", "shard-10"}
	got, err := r.AssignSlice(in)
	if err != nil {
		t.Fatal(err)
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(in)))
	if want := libraryOwners(sorted, r.Config(), hasher{}); !slices.Equal(got, want) {
		t.Fatal("AssignSlice differs from the library")
	}
}
