// Package httpserver is the one HTTP port every kshard process serves: /metrics from a
// registry passed in, /livez, /readyz built from named checks (so a failing probe says
// which check failed, as kube-apiserver's do), and /debug/pprof only when asked for.
// Every connection is bounded by read, write and idle timeouts (DefaultWriteTimeout and
// friends), so a client that never finishes a request or never reads an answer cannot
// keep a handler, or a lock it takes, busy.
package httpserver
