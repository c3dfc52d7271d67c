package shardcache

import "time"

// untilQuiet returns how long to wait, at now, before acting on a burst whose first
// arrival was at first and latest at last: until quiet has passed since the latest, but
// no later than limit after the first. Zero or less means act now. Both the informers'
// lazy start (a first assignment's Prepares) and a cluster-wide warm-up round (a
// rebalance's warm-ups) gather their burst this way.
func untilQuiet(now, first, last time.Time, quiet, limit time.Duration) time.Duration {
	return min(last.Add(quiet).Sub(now), first.Add(limit).Sub(now))
}
