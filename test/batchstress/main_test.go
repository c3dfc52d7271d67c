// Package batchstress is the batch controllers' stress test under sharding:
// three shards run job, cronjob and ttl-after-finished while hundreds of Jobs of mixed
// kinds (NonIndexed, Indexed, pods that kwok fails, podFailurePolicy, backoffLimitPerIndex,
// maxFailedIndexes) and tens of CronJobs on a one-minute schedule run, and the shard set
// is scaled out, scaled in and one shard is SIGKILLed.
//
// It is skipped unless KSHARD_BATCH_STRESS=1; `make batch-stress` runs it on the local
// control plane (about 10 minutes). Knobs: KSHARD_BATCH_STRESS_JOBS (default 304),
// KSHARD_BATCH_STRESS_CRONJOBS (default 30, one namespace each; the Jobs are spread over
// the same namespaces), KSHARD_BATCH_STRESS_WAVES (default 8: the Jobs are created in that
// many waves, 30s apart, so that every fault finds Jobs in flight).
package batchstress

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
