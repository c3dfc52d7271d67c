package endpoint

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func nAddrs(prefix string, n int) []corev1.EndpointAddress {
	out := make([]corev1.EndpointAddress, n)
	for i := range out {
		out[i] = corev1.EndpointAddress{IP: fmt.Sprintf("%s.%d.%d", prefix, i/256, i%256)}
	}
	return out
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ready and notReady are the subsets' address counts.
		ready, notReady         []int
		want                    bool
		wantReady, wantNotReady []int
	}{
		{name: "at capacity: untouched", ready: []int{600}, notReady: []int{400},
			wantReady: []int{600}, wantNotReady: []int{400}},
		{name: "ready fit: not-ready ones share the room in proportion, rounded up",
			ready: []int{500, 300}, notReady: []int{250, 50}, want: true,
			wantReady: []int{500, 300}, wantNotReady: []int{167, 33}},
		{name: "ready fit, not-ready cut", ready: []int{900, 0}, notReady: []int{100, 101}, want: true,
			wantReady: []int{900, 0}, wantNotReady: []int{50, 50}},
		{name: "too many ready: only ready kept, in proportion, the last subset gets the rest",
			ready: []int{1001, 999}, notReady: []int{5, 0}, want: true,
			wantReady: []int{501, 499}, wantNotReady: []int{0, 0}},
		{name: "rounding up can leave the last subset short", ready: []int{700, 700, 700}, notReady: []int{0, 0, 0}, want: true,
			wantReady: []int{334, 334, 332}, wantNotReady: []int{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := &corev1.Endpoints{}
			for i := range tc.ready {
				ep.Subsets = append(ep.Subsets, corev1.EndpointSubset{
					Addresses: nAddrs(fmt.Sprintf("10.%d", i), tc.ready[i]), NotReadyAddresses: nAddrs(fmt.Sprintf("11.%d", i), tc.notReady[i])})
			}
			if got := truncate(ep); got != tc.want {
				t.Fatalf("truncate %v, want %v", got, tc.want)
			}
			for i, s := range ep.Subsets {
				if len(s.Addresses) != tc.wantReady[i] || len(s.NotReadyAddresses) != tc.wantNotReady[i] {
					t.Errorf("subset %d: %d ready, %d not ready; want %d, %d", i, len(s.Addresses), len(s.NotReadyAddresses), tc.wantReady[i], tc.wantNotReady[i])
				}
				if len(s.Addresses) > 0 && s.Addresses[0].IP != fmt.Sprintf("10.%d.0.0", i) {
					t.Errorf("subset %d keeps %s first, not its first address", i, s.Addresses[0].IP)
				}
			}
		})
	}
}

func TestCapacityAnnotationCorrect(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		n           int
		want        bool
	}{
		{name: "under capacity, no annotation", n: 10, want: true},
		{name: "under capacity, annotated", n: 10, annotations: map[string]string{corev1.EndpointsOverCapacity: truncatedValue}},
		{name: "at capacity, annotated (a truncated one): always rewritten", n: maxCapacity,
			annotations: map[string]string{corev1.EndpointsOverCapacity: truncatedValue}},
		{name: "over capacity", n: maxCapacity + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subsets := []corev1.EndpointSubset{{Addresses: nAddrs("10.0", tc.n)}}
			if got := capacityAnnotationCorrect(tc.annotations, subsets); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLabelsCorrect(t *testing.T) {
	mb := map[string]string{LabelManagedBy: ControllerName}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		ep, svc  map[string]string
		wantSame bool
	}{
		{name: "managed-by and the Service's", ep: with(mb, "a", "1"), svc: map[string]string{"a": "1"}, wantSame: true},
		{name: "the headless label is ignored", ep: with(mb, corev1.IsHeadlessService, ""), svc: nil, wantSame: true},
		{name: "no managed-by", ep: map[string]string{"a": "1"}, svc: map[string]string{"a": "1"}},
		{name: "managed by another", ep: map[string]string{LabelManagedBy: "someone", "a": "1"}, svc: map[string]string{"a": "1"}},
		{name: "a Service label missing", ep: mb, svc: map[string]string{"a": "1"}},
		{name: "an extra label", ep: with(mb, "b", "2"), svc: nil},
		{name: "a different value", ep: with(mb, "a", "2"), svc: map[string]string{"a": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := labelsCorrect(tc.ep, tc.svc); got != tc.wantSame {
				t.Errorf("got %v, want %v", got, tc.wantSame)
			}
		})
	}
}
