// Package httpserver is the one HTTP port every kshard process serves: /metrics from a
// registry passed in, /livez, /readyz built from named checks (so a failing probe says
// which check failed, as kube-apiserver's do), and /debug/pprof only when asked for.
package httpserver
