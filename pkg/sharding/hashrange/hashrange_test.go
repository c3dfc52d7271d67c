package hashrange

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
)

// sortedNames returns n names sorted by FNV-1a hash.
func sortedNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%d", i)
	}
	sort.Slice(names, func(i, j int) bool { return Hash(names[i]) < Hash(names[j]) })
	return names
}

func TestHashMatchesKEP5866(t *testing.T) {
	for _, ns := range []string{"", "default", "kube-system", "ns-1"} {
		if got, want := fmt.Sprintf("%016x", Hash(ns)), sharding.HashField(ns); got != want {
			t.Errorf("Hash(%q) = %s, sharding.HashField = %s", ns, got, want)
		}
	}
}

func TestBuild(t *testing.T) {
	s := sortedNames(10) // s[0] < s[1] < … by hash
	h := func(i int) uint64 { return Hash(s[i]) }
	tests := []struct {
		name        string
		owned       []int // indexes into s
		max         int
		want        []Range
		wantForeign int
	}{
		{name: "nothing", owned: nil, want: nil},
		{name: "one", owned: []int{3}, want: []Range{{h(3), h(3)}}},
		{name: "all", owned: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, want: []Range{{h(0), h(9)}}},
		{name: "runs", owned: []int{0, 1, 4, 5, 6, 9}, want: []Range{{h(0), h(1)}, {h(4), h(6)}, {h(9), h(9)}}},
		{
			name: "merge the gap with fewest foreign", owned: []int{0, 3, 5, 9}, max: 3,
			// gaps: 0|1,2|3 (2), 3|4|5 (1), 5|6,7,8|9 (3)
			want: []Range{{h(0), h(0)}, {h(3), h(5)}, {h(9), h(9)}}, wantForeign: 1,
		},
		{
			name: "merge to one", owned: []int{0, 3, 5, 9}, max: 1,
			want: []Range{{h(0), h(9)}}, wantForeign: 6,
		},
		{
			name: "ties close the lower gap", owned: []int{0, 2, 4}, max: 2,
			want: []Range{{h(0), h(2)}, {h(4), h(4)}}, wantForeign: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			own := map[string]bool{}
			for _, i := range tt.owned {
				own[s[i]] = true
			}
			names := append([]string(nil), s...)
			rand.New(rand.NewSource(1)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			got := Build(names, func(n string) bool { return own[n] }, tt.max)
			if fmt.Sprint(got.Ranges) != fmt.Sprint(tt.want) {
				t.Errorf("ranges = %v, want %v", got.Ranges, tt.want)
			}
			if got.Owned != len(tt.owned) || got.Foreign != tt.wantForeign {
				t.Errorf("owned, foreign = %d, %d; want %d, %d", got.Owned, got.Foreign, len(tt.owned), tt.wantForeign)
			}
			for i, n := range s {
				if own[n] && !got.Covers(n) {
					t.Errorf("owned %s (s[%d]) not covered", n, i)
				}
			}
		})
	}
}

func TestDefaultAndCap(t *testing.T) {
	names := sortedNames(5000)
	every2 := func(n string) bool { return Hash(n)%2 == 0 } // scattered: ~1,250 runs
	if got := len(Build(names, every2, 0).Ranges); got != DefaultMaxRanges {
		t.Errorf("default: %d ranges, want %d", got, DefaultMaxRanges)
	}
	if got := len(Build(names, every2, 5000).Ranges); got != MaxRanges {
		t.Errorf("cap: %d ranges, want %d", got, MaxRanges)
	}
	sel := Build(names, every2, MaxRanges).String()
	if n := len([]rune(sel)); n >= 100000 {
		t.Errorf("a selector of %d ranges is %d code points, over the apiserver's limit", MaxRanges, n)
	}
}

func TestSelectorMatchesEveryOwnedNamespace(t *testing.T) {
	names := sortedNames(3000)
	r := rand.New(rand.NewSource(7))
	own := map[string]bool{}
	for _, n := range names {
		own[n] = r.Intn(3) == 0
	}
	set := Build(names, func(n string) bool { return own[n] }, 200)
	if len(set.Ranges) != 200 {
		t.Fatalf("%d ranges, want 200", len(set.Ranges))
	}
	sel := set.Selector()
	covered := 0
	for _, n := range names {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "p"}}
		ok, err := sel.Matches(pod)
		if err != nil {
			t.Fatal(err)
		}
		if own[n] && !ok {
			t.Errorf("selector does not match owned namespace %s", n)
		}
		if ok != set.Covers(n) {
			t.Errorf("Matches(%s) = %v, Covers = %v", n, ok, set.Covers(n))
		}
		if ok {
			covered++
		}
	}
	if covered != set.Owned+set.Foreign {
		t.Errorf("%d namespaces match, set says %d owned + %d foreign", covered, set.Owned, set.Foreign)
	}
}

func TestNothingMatchesNothing(t *testing.T) {
	set := Build([]string{"a", "b"}, func(string) bool { return false }, 0)
	sel := set.Selector()
	if sel.Empty() {
		t.Fatal("the selector of no range is Everything")
	}
	for _, n := range []string{"", "a", "b", "default"} {
		if ok, _ := sel.Matches(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n}}); ok {
			t.Errorf("the empty set matches %q", n)
		}
	}
	if ok, _ := sel.Matches(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: nothingName}}); !ok {
		t.Errorf("%q does not match the one hash it names", set.String())
	}
	if r := sel.Requirements(); len(r) != 1 || !sharding.HexLess(r[0].Start, r[0].End) {
		t.Errorf("String() = %q: the apiserver needs start < end", set.String())
	}
}

func TestTopOfHashSpace(t *testing.T) {
	set := Set{Ranges: []Range{{Lo: 1 << 63, Hi: ^uint64(0)}}}
	if got := set.Requirements()[0].End; got != "0x10000000000000000" {
		t.Errorf("end of the last range = %s", got)
	}
}
