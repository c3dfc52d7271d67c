// Package endpoints tests the Endpoints and EndpointSlice controllers end to end on the
// real local control plane, against whoever runs them: TestMain starts kshard (one
// coordinator, two shards) for those the cluster's kube-controller-manager does not run.
// Pods are kwok's: bound to a kwok node, kwok gives them an IP and makes them Ready; a
// test flips readiness by writing the pod's Ready condition (kwok does not set it again).
// Run them against the reference cluster, where kube-controller-manager runs everything,
// with KSHARD_UPSTREAM_CONTROLLERS=1 and KSHARD_KUBECONFIG pointing at it (the handoff
// test is skipped there).
//
// This file is the endpoint helper's minimal one; the endpointslice helper owns the
// package's main_test.go, which names both controllers.
package endpoints

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for the controllers, not computing.
		Parallel: 8,
		Names:    []string{"endpoint"},
		Shards:   2,
	})
}
