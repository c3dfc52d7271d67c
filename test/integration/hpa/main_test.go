// Package hpa tests the horizontal pod autoscaler's world on the local control plane: the
// metrics pipeline every HPA reads (metrics.k8s.io from metrics-server over kwok's
// emulated kubelet metrics; custom.metrics.k8s.io and external.metrics.k8s.io from the
// tests' metrics adapter, test/metricsadapter), through the same clients and aggregation
// path the HPA uses.
package hpa

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
