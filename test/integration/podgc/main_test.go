// Package podgc tests the pod garbage collector end to end on the local control plane:
// TestMain starts kshard (one coordinator, three shards) running podgc with a
// --terminated-pod-gc-threshold of 5 and, for the tests only, a 2 s quarantine of missing
// nodes (--podgc-quarantine; upstream's is 40 s). Orphans come from kwok nodes the tests
// create and delete (never the cluster's shared ones). The threshold is the cluster's, so
// TestThresholdSharded runs alone (not parallel) before the parallel tests, which leave
// at most one terminated pod at a time.
package podgc

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

// threshold is the shards' --terminated-pod-gc-threshold.
const threshold = 5

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Parallel:     4,
		Names:        []string{"podgc"},
		Coordinators: 1,
		Shards:       3,
		ShardArgs:    []string{"--terminated-pod-gc-threshold=5", "--podgc-quarantine=2s"},
	})
}
