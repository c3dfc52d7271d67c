// Package coordinatorrpc is the coordinator-side gRPC edge: it serves the kshard.v1 Coordinator gRPC
// service while this replica leads, feeds every validated shard message into the pure
// handoff.Coordinator state machine, sends the commands it produces on the right stream,
// ticks it with the clock, and turns its events and stats into logs and Prometheus
// metrics. It also answers GET /assignments.
//
// All state-machine calls happen under one mutex; sending is done by one goroutine per
// stream with a bounded buffer, so a slow shard can never block the coordinator (its
// stream is closed instead and it reconnects).
package coordinatorrpc
