// Package peerlimit bounds what one network peer of the coordinator's gRPC port can make
// the coordinator spend before it has proven which shard it is: streams waiting for
// their hello and the TokenReviews of their tokens. Without it one client holding a valid
// client certificate (every shard holds the same one) could take every session slot with
// silent streams, or spend the API server review budget every shard shares with junk
// tokens, and shut the real shards out.
//
// A peer is the IP address a connection comes from (Key), not its certificate: the chart
// gives every shard the same client certificate, so keyed by certificate a holder of it
// would share one budget with every real shard, and a holder of many certificates would
// get many budgets from one address. Every table here is bounded: an entry exists only
// while it holds something (Gate) or until its bucket has refilled (Buckets).
package peerlimit
