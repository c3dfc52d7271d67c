// Package protocol translates between the wire messages of proto/kshard/v1 and the pure
// handoff state machine's Report and Command types, and validates everything that comes
// off the wire first: a malformed message becomes an error (counted and logged by the
// edge), never a value the state machine has to defend against.
package protocol
