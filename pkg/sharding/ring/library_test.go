package ring

import (
	"fmt"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"

	"github.com/kshard/kshard/pkg/sharding/partition"
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

// libraryOwners is the library's bounded-load assignment (what the ring
// computed before AssignFrom), fed the sorted, de-duplicated names in one
// consistent.New. It returns nil where the library panics for lack of room.
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

// TestPreferenceMatchesLibrary proves the ring is the library's: with room
// everywhere (Load = N, so the library's cap ceil(P/N × N) = P never binds),
// the library gives every partition the first member of its preference
// order. The virtual-node hashes, their order, the "last added wins" rule
// for colliding hashes and the start of each walk therefore all agree.
func TestPreferenceMatchesLibrary(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		n    int
		mask uint64 // 0: full xxhash
	}{
		{name: "defaults, 1 member", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 1},
		{name: "defaults, 7 members", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 7},
		{name: "defaults, 150 members", cfg: Config{PartitionCount: 4096}.WithDefaults(), n: 150},
		{name: "more members than partitions", cfg: Config{PartitionCount: 61, ReplicationFactor: 10}, n: 80},
		{name: "sim shape", cfg: Config{PartitionCount: 48, ReplicationFactor: 20}, n: 12},
		{name: "colliding virtual nodes", cfg: Config{PartitionCount: 256, ReplicationFactor: 50}, n: 20, mask: 0x3ff},
		{name: "members left without a virtual node", cfg: Config{PartitionCount: 97, ReplicationFactor: 30}, n: 9, mask: 0x7},
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
			cfg := tt.cfg
			cfg.Load = float64(tt.n)
			want := libraryOwners(names, cfg, lib)
			if want == nil {
				t.Fatal("the library panicked")
			}
			vn := buildRing(names, cfg.ReplicationFactor, sum)
			for p := range cfg.PartitionCount {
				if got := names[vn[search(vn, partitionHash(p, sum))].member]; got != want[p] {
					t.Fatalf("partition %d: first preference %s, library %s", p, got, want[p])
				}
			}
		})
	}
}

// TestPreference checks the walk (preference) against the library's owner (its
// first entry) and that it names every member exactly once.
func TestPreference(t *testing.T) {
	r, err := New(Config{PartitionCount: 512})
	if err != nil {
		t.Fatal(err)
	}
	in := []string{"c", "a", "b", "a", "shard-9", "shard-10"}
	sorted := slices.Compact(slices.Sorted(slices.Values(in)))
	cfg := r.Config()
	cfg.Load = float64(len(sorted))
	want := libraryOwners(sorted, cfg, hasher{})
	for p := range 512 {
		pref := r.preference(in, partition.ID(p))
		if pref[0] != want[p] {
			t.Fatalf("partition %d: first preference %s, library %s", p, pref[0], want[p])
		}
		if got := slices.Sorted(slices.Values(pref)); !slices.Equal(got, sorted) {
			t.Fatalf("partition %d: preference %v does not name every member once", p, pref)
		}
	}
	if got := r.preference(nil, 0); got != nil {
		t.Fatalf("preference(no members) = %v, want nil", got)
	}
}

// TestPlaceWithoutVirtualNodes: a member whose every virtual node lost a hash
// collision is on nobody's preference order, so it gets no quota and no
// partition (it may not keep any either); the members on the ring share all
// partitions within floor/ceil.
func TestPlaceWithoutVirtualNodes(t *testing.T) {
	const p, n = 97, 9
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("kshard-shard-%d", i)
	}
	vn := buildRing(names, 30, weakHasher{mask: 0x7}.Sum64)
	onRing := map[int32]bool{}
	for _, v := range vn {
		onRing[v.member] = true
	}
	if len(onRing) == n {
		t.Fatal("the weak hash left every member on the ring; the test needs one without")
	}
	cur := make([]int32, p)
	for i := range cur {
		cur[i] = int32(i % n) // every member, on the ring or not, holds some
	}
	owner := place(vn, n, cur, nil, nil)
	count := map[int32]int{}
	for _, m := range owner {
		count[m]++
	}
	lo := p / len(onRing)
	for m := range int32(n) {
		c := count[m]
		switch {
		case !onRing[m] && c != 0:
			t.Fatalf("member %d has no virtual node but owns %d", m, c)
		case onRing[m] && (c < lo || c > lo+1):
			t.Fatalf("member %d owns %d, want %d or %d", m, c, lo, lo+1)
		}
	}
}
