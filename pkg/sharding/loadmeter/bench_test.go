package loadmeter

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// BenchmarkRequest is the meter's cost per API request of a controller: the limiter
// wrapper around a limiter that never waits, then the transport wrapper around a
// transport that answers at once, as client-go calls them for each request (Wait with
// the reconcile's context, then RoundTrip). With the real partition map's hash.
// Parallel runs every core's requests into the same meter, across partitions.
//
//	go test ./pkg/sharding/loadmeter -run '^$' -bench Request -benchmem
func BenchmarkRequest(b *testing.B) {
	pmap, err := partition.NewMap(partition.DefaultCount)
	if err != nil {
		b.Fatal(err)
	}
	// The server's answer is one response, so that the loop allocates only what the
	// meter does.
	var next http.RoundTripper = fixedRT{resp: &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}}
	setup := func(b *testing.B) (*Meter, http.RoundTripper, *limiterPair) {
		m, err := New(partition.DefaultCount, DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		return m, Transport(m, pmap.For, 1)(next), &limiterPair{metered: Limiter(m, "deployment", instant{}), bare: instant{}}
	}
	request := func(i int) (*http.Request, context.Context) {
		ns := "namespace-" + strconv.Itoa(i%64)
		u, _ := url.Parse("https://apiserver.example/apis/apps/v1/namespaces/" + ns + "/deployments/web")
		ctx := gate.WithPartition(context.Background(), pmap.For(ns))
		return (&http.Request{Method: http.MethodPut, URL: u}).WithContext(ctx), ctx
	}
	b.Run("bare", func(b *testing.B) {
		_, _, l := setup(b)
		req, ctx := request(0)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.bare.Wait(ctx)
			_, _ = next.RoundTrip(req)
		}
	})
	b.Run("metered", func(b *testing.B) {
		_, rt, l := setup(b)
		req, ctx := request(0)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.metered.Wait(ctx)
			_, _ = rt.RoundTrip(req)
		}
	})
	b.Run("metered-parallel", func(b *testing.B) {
		_, rt, l := setup(b)
		var worker atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req, ctx := request(int(worker.Add(1)))
			for pb.Next() {
				_ = l.metered.Wait(ctx)
				_, _ = rt.RoundTrip(req)
			}
		})
	})
}

// fixedRT answers every request with resp.
type fixedRT struct{ resp *http.Response }

func (f fixedRT) RoundTrip(*http.Request) (*http.Response, error) { return f.resp, nil }

type limiterPair struct {
	metered, bare interface {
		Wait(context.Context) error
	}
}

// BenchmarkSnapshot is the cost of one report's sample at 4,096 partitions, all held.
func BenchmarkSnapshot(b *testing.B) {
	m, c := newTestMeterOf(b, partition.DefaultCount)
	for p := range partition.ID(partition.DefaultCount) {
		m.Acquired(p)
		m.Done(p)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Snapshot(c.advance(10 * time.Second))
	}
}

// newTestMeterOf is newTestMeter with n partitions.
func newTestMeterOf(t testing.TB, n int) (*Meter, *clock) {
	t.Helper()
	c := &clock{now: t0}
	opts := DefaultOptions()
	opts.Now = c.Now
	m, err := New(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}
