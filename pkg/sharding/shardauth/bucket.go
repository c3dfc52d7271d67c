package shardauth

import "time"

// Bucket is a token bucket on an explicit clock: rate tokens per second, at most burst
// saved up. It is a value so that a map of them (one per shard) stays cheap, and it can
// tell when it is full again, so such a map can drop idle entries without losing
// anything. Not safe for concurrent use: callers hold their own lock.
type Bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// NewBucket returns a full bucket.
func NewBucket(rate float64, burst int) Bucket {
	return Bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// Allow takes a token if there is one at now.
func (b *Bucket) Allow(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Full reports whether the bucket is back at its burst at now, i.e. indistinguishable
// from a new one.
func (b *Bucket) Full(now time.Time) bool {
	b.refill(now)
	return b.tokens >= b.burst
}

func (b *Bucket) refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
}
