//lint:file-ignore SA1019 kube-controller-manager repacks core/v1 Endpoints subsets, deprecated in favour of EndpointSlices, for the Endpoints and mirroring controllers.

package endpointsubsets

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

func port(name string, n int32) corev1.EndpointPort {
	return corev1.EndpointPort{Name: name, Port: n, Protocol: corev1.ProtocolTCP}
}

func addrs(as ...corev1.EndpointAddress) []corev1.EndpointAddress { return as }

// addr is the address of pod name with IP ip on node n1.
func addr(name, ip string) corev1.EndpointAddress {
	n := "n1"
	return corev1.EndpointAddress{IP: ip, NodeName: &n,
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

func TestRepack(t *testing.T) {
	a, b, c := addr("a", "10.0.0.1"), addr("b", "10.0.0.2"), addr("c", "10.0.0.3")
	for _, tc := range []struct {
		name string
		in   []corev1.EndpointSubset
		want []corev1.EndpointSubset
	}{
		{name: "empty", in: nil, want: []corev1.EndpointSubset{}},
		{name: "one address per port is merged into one subset per port set",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("https", 443)}},
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{port("https", 443)}},
			},
			want: []corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: sortedPorts(port("http", 80), port("https", 443))}}},
		{name: "addresses on different port sets make different subsets",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{port("http", 8080)}},
			},
			want: sortSubsets([]corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{port("http", 8080)}},
			})},
		{name: "not ready on a port trumps ready on it",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{NotReadyAddresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(c), Ports: []corev1.EndpointPort{port("http", 80)}},
			},
			want: []corev1.EndpointSubset{{Addresses: addrs(c), NotReadyAddresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}}}},
		{name: "subsets without ports keep their addresses",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{}},
				{NotReadyAddresses: addrs(a)},
			},
			want: []corev1.EndpointSubset{{Addresses: addrs(b), NotReadyAddresses: addrs(a)}}},
		{name: "duplicates (same IP and pod) collapse; the same IP of another pod stays",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(a, a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(func() corev1.EndpointAddress { x := addr("x", "10.0.0.1"); x.TargetRef.UID = "uid-0"; return x }()),
					Ports: []corev1.EndpointPort{port("http", 80)}},
			},
			want: []corev1.EndpointSubset{{Addresses: addrs(
				func() corev1.EndpointAddress { x := addr("x", "10.0.0.1"); x.TargetRef.UID = "uid-0"; return x }(), a),
				Ports: []corev1.EndpointPort{port("http", 80)}}}},
		{name: "a port numbered 0 is dropped, its addresses kept (upstream's sentinel test is port > 0)",
			in: []corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("none", 0), port("http", 80)}},
				{Addresses: addrs(b), Ports: []corev1.EndpointPort{port("none", 0)}},
			},
			want: sortSubsets([]corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: []corev1.EndpointPort{port("http", 80)}},
				{Addresses: addrs(a, b)},
			})},
		{name: "addresses sort bytewise by IP", in: []corev1.EndpointSubset{
			{Addresses: addrs(addr("p", "10.0.0.9"), addr("q", "10.0.0.10")), Ports: []corev1.EndpointPort{port("http", 80)}}},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("q", "10.0.0.10"), addr("p", "10.0.0.9")),
				Ports: []corev1.EndpointPort{port("http", 80)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := make([]corev1.EndpointSubset, len(tc.in))
			for i := range tc.in {
				in[i] = *tc.in[i].DeepCopy()
			}
			got := Repack(in)
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got\n%v\nwant\n%v", got, tc.want)
			}
			if !apiequality.Semantic.DeepEqual(in, tc.in) {
				t.Error("the input was changed")
			}
			if again := Repack(got); !apiequality.Semantic.DeepEqual(again, got) {
				t.Errorf("not canonical: repacked again\n%v", again)
			}
		})
	}
}

func sortedPorts(ps ...corev1.EndpointPort) []corev1.EndpointPort {
	sortByHash(ps)
	return ps
}

// TestSortByHashIsUpstreamOrder pins the hash order of a few ports as upstream's
// RepackSubsets sorts them (k8s.io/kubernetes/pkg/api/v1/endpoints), so that a change of
// the dump or the hash shows.
func TestSortByHashIsUpstreamOrder(t *testing.T) {
	ps := []corev1.EndpointPort{port("a", 1), port("b", 2), port("c", 3), port("d", 4)}
	sortByHash(ps)
	var got []string
	for _, p := range ps {
		got = append(got, p.Name)
	}
	// Upstream's RepackSubsets returns these four ports of one address in this order
	// (checked by running it, k8s.io/kubernetes v1.37.1).
	if want := []string{"c", "d", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("port order %v, want upstream's %v", got, want)
	}
}

// TestRepackMatchesUpstream: the canonical form of each input equals the one
// kube-controller-manager's RepackSubsets gives, order included (which addresses a subset
// over the mirroring limit keeps, and the order of a slice's ports, follow from it). The
// vectors were computed, not written by hand: testdata/repack-vectors.json holds each
// input and what k8s.io/kubernetes v1.37.1's pkg/api/v1/endpoints.RepackSubsets returned
// for it, run by a throwaway program built in the tools module (hack/tools/kube), which
// may import k8s.io/kubernetes.
func TestRepackMatchesUpstream(t *testing.T) {
	vectors := readVectors(t, "repack-vectors.json", false)
	if len(vectors) < 7 {
		t.Fatalf("%d vectors, want the 7 recorded", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			in, _ := json.Marshal(v.In)
			got := Repack(v.In)
			if !apiequality.Semantic.DeepEqual(got, v.Upstream) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(v.Upstream)
				t.Errorf("Repack:\n got %s\nwant %s", g, w)
			}
			// The input is left as it was.
			after, _ := json.Marshal(v.In)
			if string(after) != string(in) {
				t.Errorf("input changed:\n%s\n%s", in, after)
			}
		})
	}
}

// TestRepackMatchesUpstreamOnRandomInputs: Repack equals upstream's RepackSubsets, order
// included, on 1,000 random inputs. testdata/repack-random.json.gz holds each input and
// what k8s.io/kubernetes v1.37.1's pkg/api/v1/endpoints.RepackSubsets returned for it,
// computed by a throwaway program in a scratch copy of the tools module (hack/tools/kube):
// math/rand seeded with 30; up to 4 subsets, each of up to 3 ports (none: a subset
// without ports) named a–d, numbered 1–5 or, one in six, 0, TCP, UDP or SCTP, one in
// five with an appProtocol; up to 4 ready and 3 not-ready addresses among 24 IPs, without
// a target, with a target without a UID, or targeting one of 4 pods, some with hostnames
// and node names. So duplicates, an address ready on one port and not on another, the
// same IP of different pods, and ports that are not port numbers all occur.
func TestRepackMatchesUpstreamOnRandomInputs(t *testing.T) {
	vectors := readVectors(t, "repack-random.json.gz", true)
	if len(vectors) != 1000 {
		t.Fatalf("%d vectors, want the 1000 recorded", len(vectors))
	}
	differ := 0
	for _, v := range vectors {
		in, _ := json.Marshal(v.In)
		got := Repack(v.In)
		if !apiequality.Semantic.DeepEqual(got, v.Upstream) {
			if differ++; differ <= 3 {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(v.Upstream)
				t.Errorf("input %s %s:\n got %s\nwant %s", v.Name, in, g, w)
			}
		}
		if after, _ := json.Marshal(v.In); string(after) != string(in) {
			t.Errorf("input %s changed:\n%s\n%s", v.Name, in, after)
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d inputs repacked unlike upstream", differ, len(vectors))
	}
}

// vector is an input of Repack and what upstream's RepackSubsets returned for it.
type vector struct {
	Name     string                  `json:"name"`
	In       []corev1.EndpointSubset `json:"in"`
	Upstream []corev1.EndpointSubset `json:"upstream"`
}

// readVectors reads testdata/name, gzipped when gzipped.
func readVectors(t *testing.T, name string, gzipped bool) []vector {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if gzipped {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	var vectors []vector
	if err := json.NewDecoder(r).Decode(&vectors); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return vectors
}
