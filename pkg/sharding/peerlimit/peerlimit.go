package peerlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Unknown is the key of a context without a gRPC peer (a caller outside a gRPC stream):
// all such callers share one budget.
const Unknown = "unknown"

// Key returns the peer key of a gRPC stream's context: the IP address of the remote end
// (the host of its address when that is not TCP, e.g. a bufconn or a Unix socket).
func Key(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return Unknown
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	s := p.Addr.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// Describe returns the peer's address and, with mutual TLS, the subject and a short
// fingerprint of its client certificate: who to look for when a peer is refused.
func Describe(ctx context.Context) (addr, cert string) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Unknown, ""
	}
	if p.Addr != nil {
		addr = p.Addr.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		c := ti.State.PeerCertificates[0]
		sum := sha256.Sum256(c.Raw)
		cert = c.Subject.String() + " sha256:" + hex.EncodeToString(sum[:8])
	}
	return addr, cert
}

// Buckets is a token bucket per key. The table is bounded by max: a bucket that has
// refilled is the same as a new one, so it is dropped when room is needed; when every
// bucket is still in use a new key is refused (it takes that many keys spending at once).
type Buckets struct {
	rate  float64
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// NewBuckets returns buckets of rate tokens per second and burst, for at most max keys.
func NewBuckets(r float64, burst, max int) *Buckets {
	return &Buckets{rate: r, burst: burst, max: max, buckets: map[string]*rate.Limiter{}}
}

// Allow takes a token of key at now. full is true when it was refused because the table
// had no room for a new key rather than because key spent its own.
func (b *Buckets) Allow(key string, now time.Time) (ok, full bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.buckets[key]
	if l == nil {
		if len(b.buckets) >= b.max {
			for k, v := range b.buckets {
				if v.TokensAt(now) >= float64(b.burst) {
					delete(b.buckets, k)
				}
			}
		}
		if len(b.buckets) >= b.max {
			return false, true
		}
		l = rate.NewLimiter(rate.Limit(b.rate), b.burst)
		b.buckets[key] = l
	}
	return l.AllowN(now, 1), false
}

// Len is the number of keys in the table.
func (b *Buckets) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}

// Gate counts what is in flight per key, at most perKey for one key and total for all.
// A key's entry is removed when its count drops to zero, so the table never holds more
// than total entries.
type Gate struct {
	perKey, total int

	mu    sync.Mutex
	n     int
	byKey map[string]int
}

// Reasons Gate.Acquire refuses with.
const (
	ReasonPerKey = "per_peer"
	ReasonTotal  = "total"
)

// NewGate returns a gate of perKey per key and total over all keys.
func NewGate(perKey, total int) *Gate {
	return &Gate{perKey: perKey, total: total, byKey: map[string]int{}}
}

// Acquire takes one place of key; release gives it back (calling it again does nothing).
// On refusal release is nil and reason says which bound was met.
func (g *Gate) Acquire(key string) (release func(), reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.byKey[key] >= g.perKey:
		return nil, ReasonPerKey
	case g.n >= g.total:
		return nil, ReasonTotal
	}
	g.byKey[key]++
	g.n++
	var once sync.Once
	return func() { once.Do(func() { g.release(key) }) }, ""
}

func (g *Gate) release(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.byKey[key]--; g.byKey[key] <= 0 {
		delete(g.byKey, key)
	}
}

// InFlight returns what is held now over all keys and the number of keys holding it.
func (g *Gate) InFlight() (n, keys int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n, len(g.byKey)
}
