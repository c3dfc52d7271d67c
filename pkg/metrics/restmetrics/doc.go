// Package restmetrics feeds client-go's REST client metrics (request latency by verb,
// results by code and method, client-side rate-limiter wait, retries) into a Prometheus
// registerer passed in. client-go accepts one set of adapters per process, so Register is
// called once, from main.
package restmetrics
