package hashrange

import (
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// quarterOwned returns n namespace names like a large cluster's and a random quarter of
// them owned, as one of 4 shards owns its share.
func quarterOwned(n int, seed int64) ([]string, map[string]bool) {
	r := rand.New(rand.NewSource(seed))
	names := make([]string, n)
	own := make(map[string]bool, n)
	for i := range names {
		names[i] = fmt.Sprintf("lc-%05d", i)
		own[names[i]] = r.Intn(4) == 0
	}
	return names, own
}

func TestBuildSliced(t *testing.T) {
	names, own := quarterOwned(4000, 11)
	owned := func(n string) bool { return own[n] }
	tests := []struct {
		name             string
		maxRanges        int
		minBits, maxBits int
		wantBits         int  // -1: any
		wantExact        bool // no foreign namespace covered
	}{
		{name: "one slice is a superset", maxRanges: 500, minBits: 0, maxBits: 0, wantBits: 0},
		{name: "enough slices are exact", maxRanges: 500, minBits: 0, maxBits: MaxSliceBits, wantBits: -1, wantExact: true},
		{name: "the fewest slices that are exact", maxRanges: 300, minBits: 0, maxBits: MaxSliceBits, wantBits: 2, wantExact: true},
		{name: "minBits is kept", maxRanges: 300, minBits: 4, maxBits: MaxSliceBits, wantBits: 4, wantExact: true},
		{name: "maxBits caps", maxRanges: 50, minBits: 0, maxBits: 2, wantBits: 2},
		{name: "maxBits above MaxSliceBits", maxRanges: 10, minBits: 0, maxBits: 99, wantBits: MaxSliceBits},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := BuildSliced(names, owned, tt.maxRanges, tt.minBits, tt.maxBits)
			if tt.wantBits >= 0 && s.Bits != tt.wantBits {
				t.Errorf("Bits = %d, want %d", s.Bits, tt.wantBits)
			}
			if len(s.Slices) != 1<<s.Bits {
				t.Fatalf("%d slices for %d bits", len(s.Slices), s.Bits)
			}
			if tt.wantExact && s.Foreign != 0 {
				t.Errorf("%d foreign namespaces covered, want an exact selector", s.Foreign)
			}
			if !tt.wantExact && s.Foreign == 0 {
				t.Errorf("no foreign namespace covered: the case does not test a superset")
			}
			owners, covered := 0, 0
			for _, n := range names {
				h := Hash(n)
				i := s.SliceOf(n)
				if i != SliceOf(h, s.Bits) || (s.Bits > 0 && uint64(i) != h>>(64-s.Bits)) {
					t.Fatalf("SliceOf(%s) = %d", n, i)
				}
				// The slice's own selector, as the apiserver evaluates it, decides.
				ok, err := s.Slices[i].Selector().Matches(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "p"}})
				if err != nil {
					t.Fatal(err)
				}
				if ok != s.Covers(n) {
					t.Errorf("slice %d matches %s = %v, Covers = %v", i, n, ok, s.Covers(n))
				}
				for j, other := range s.Slices {
					if j != i && other.CoversHash(h) {
						t.Errorf("%s (slice %d) is covered by slice %d", n, i, j)
					}
				}
				if own[n] {
					owners++
					if !ok {
						t.Errorf("owned namespace %s is not covered", n)
					}
				}
				if ok {
					covered++
				}
			}
			if s.Owned != owners || covered != s.Owned+s.Foreign {
				t.Errorf("%d owned, %d covered; Sliced says %d owned + %d foreign", owners, covered, s.Owned, s.Foreign)
			}
			for i, set := range s.Slices {
				if len(set.Ranges) > tt.maxRanges {
					t.Errorf("slice %d has %d ranges, more than %d", i, len(set.Ranges), tt.maxRanges)
				}
			}
			if got := len(s.Strings()); got != len(s.Slices) {
				t.Errorf("%d selectors for %d slices", got, len(s.Slices))
			}
		})
	}
}

func TestBuildSlicedOwningNothing(t *testing.T) {
	s := BuildSliced([]string{"a", "b", "c"}, func(string) bool { return false }, 0, 1, MaxSliceBits)
	if s.Bits != 1 || s.Ranges() != 0 || s.Covers("a") {
		t.Errorf("owning nothing: bits %d, %d ranges, covers a = %v", s.Bits, s.Ranges(), s.Covers("a"))
	}
	for i, sel := range s.Strings() {
		if want := (Set{}).String(); sel != want {
			t.Errorf("slice %d: selector %q, want Nothing's %q", i, sel, want)
		}
	}
	if (Sliced{}).Covers("a") {
		t.Error("the zero Sliced covers a namespace")
	}
}

func TestSameSlice(t *testing.T) {
	names, own := quarterOwned(2000, 3)
	a := BuildSliced(names, func(n string) bool { return own[n] }, 0, 2, 2)
	own[names[0]] = !own[names[0]]
	b := BuildSliced(names, func(n string) bool { return own[n] }, 0, 2, 2)
	changed := a.SliceOf(names[0])
	for i := range a.Slices {
		if got := a.SameSlice(b, i); got != (i != changed) {
			t.Errorf("SameSlice(%d) = %v; only slice %d changed", i, got, changed)
		}
	}
	if a.SameSlice(BuildSliced(names, func(n string) bool { return own[n] }, 0, 3, 3), 0) {
		t.Error("slices of different widths compare equal")
	}
}
