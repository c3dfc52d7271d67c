package horizontalpodautoscaling

import (
	"time"

	"k8s.io/client-go/util/workqueue"
)

// fixedIntervalRateLimiter makes every AddRateLimited wait the same interval, failure or
// not, as upstream's FixedItemIntervalRateLimiter: each sync re-adds its key, so every
// HPA is synced once per --horizontal-pod-autoscaler-sync-period.
type fixedIntervalRateLimiter struct{ interval time.Duration }

func newFixedIntervalRateLimiter(interval time.Duration) workqueue.TypedRateLimiter[string] {
	return fixedIntervalRateLimiter{interval: interval}
}

// When is always the interval.
func (r fixedIntervalRateLimiter) When(string) time.Duration { return r.interval }

// NumRequeues is always 1, as upstream's (no key ever counts as failing repeatedly).
func (r fixedIntervalRateLimiter) NumRequeues(string) int { return 1 }

// Forget has nothing to forget.
func (r fixedIntervalRateLimiter) Forget(string) {}
