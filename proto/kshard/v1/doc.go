// Package kshardv1 holds the generated Go code of the coordinator ⇄ shard session
// protocol (session.proto). Regenerate with `make generate`; `make verify` fails when the
// checked-in code is stale.
package kshardv1
