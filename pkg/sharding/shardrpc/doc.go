// Package shardrpc is the shard-side gRPC edge of the session protocol: it dials the coordinator
// (its replicas' addresses, a host name standing for every address it resolves to, e.g. a
// headless Service; following a follower's hint to the leader; giving up on an address
// that does not complete the handshake within a second, e.g. a frozen process, and passing
// over an address that failed lately while others are left), keeps one Session stream open with reconnects and backoff, sends heartbeats, and drives
// the pure handoff.Shard state machine with what arrives. The state machine's actions go
// to a Handler (the shard runtime: caches and the fenced work queue); its lease deadline
// goes to the Handler too, so workers stop at the deadline even while this loop is not
// running (a paused process checks the clock before it starts any work).
package shardrpc
