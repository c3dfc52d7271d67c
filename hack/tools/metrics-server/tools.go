//go:build tools

// Package tools pins the metrics-server command this module builds: the local control
// planes serve metrics.k8s.io from it, scraping kwok's emulated kubelet resource metrics,
// so the HPA's tests read real resource metrics.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
