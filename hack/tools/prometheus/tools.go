//go:build tools

// Package tools pins the Prometheus server command this module builds for the dashboard
// test and `make demo`.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
