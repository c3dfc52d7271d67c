// Package promutil holds the one way kshard registers Prometheus series: every package
// that exports series registers them itself, with a function that takes a
// prometheus.Registerer and returns an error (NewMetrics for instruments the package
// updates, RegisterMetrics for values computed at scrape time). Nothing registers with
// the global registry; the shard wraps the registerer it passes with its shard label.
package promutil
