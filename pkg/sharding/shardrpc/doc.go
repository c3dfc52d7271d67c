// Package shardrpc is the shard-side gRPC edge of the session protocol: it dials the coordinator
// (one address, e.g. a Service, or several, following a follower's hint to the leader),
// keeps one Session stream open with reconnects and backoff, sends heartbeats, and drives
// the pure handoff.Shard state machine with what arrives. The state machine's actions go
// to a Handler (the shard runtime: caches and the fenced work queue); its lease deadline
// goes to the Handler too, so workers stop at the deadline even while this loop is not
// running (a paused process checks the clock before it starts any work).
package shardrpc
