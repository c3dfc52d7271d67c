// Package dashcheck checks the chart's Grafana dashboards against a real Prometheus: the
// parts of Grafana's dashboard model the tests read (dashboard.go), a Prometheus server of
// the tool cache and its HTTP API (prometheus.go), Grafana's variable resolution and the
// check that every panel's every query returns data (check.go), and the load that gives
// every panel data on a running kshard (load.go).
//
// Two tests use it: test/integration/dashboards, with kshard's processes on the host and
// Prometheus finding them through file_sd, and test/e2e/helm, with kshard's pods on the
// real node and Prometheus in the node's network namespace finding them through a scrape
// configuration made from the chart's ServiceMonitor.
package dashcheck
