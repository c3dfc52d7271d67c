// Package componentopts holds the flags and defaults that both kshard binaries (the
// coordinator and the shard) share: the replica's identity, the kubeconfig, the HTTP
// endpoint of /metrics, /livez and /readyz, pprof, and logging.
package componentopts
