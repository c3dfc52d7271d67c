// Package audit is a test-only controller ("kshard-audit", off by default) that proves
// the sharding invariant from the outside: it reconciles every ConfigMap labelled
// kshard.io/audit=true, again and again, and appends one JSON line per reconcile
// (shard, namespace, name, start, end) to a file. The integration tests read those files
// and check that no two shards ever reconciled one namespace at overlapping times.
package audit
