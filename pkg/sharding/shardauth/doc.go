// Package shardauth binds a coordinator session to a verified shard identity.
//
// Without it a shard's identity would be whatever its Hello says, and every shard shares
// one client certificate: any holder of that certificate could squat another shard's ID
// with a larger incarnation, steal its partitions with a larger epoch, or feed the leader a
// newer term. The coordinator therefore authenticates every session stream before its
// Hello reaches the state machine.
//
// The production mode is TokenReview: each shard pod sends its projected, pod-bound
// ServiceAccount token (audience "kshard-coordinator" by default) as gRPC metadata
// ("authorization: Bearer <token>"). The coordinator asks the API server to review it and
// accepts the session only if the token belongs to the configured shard ServiceAccount and
// its authentication.kubernetes.io/pod-name extra is exactly the shard ID the Hello claims.
// The pod name is the identity the API server itself vouches for, which is also what a
// server-side admission fence keys on. Positive reviews are cached for a short time (never
// past the token's own expiry) so that a flood of Hellos does not become a flood of
// TokenReviews, and uncached reviews are rate limited.
//
// A Hello also names the shard group the shard runs in (placement by load puts a group's
// pinned partitions on its shards). PodGroups verifies that claim for a TokenReview
// identity: the pod the token is bound to, read by name and checked by UID, must carry the
// label kshard.io/shard-group with the claimed group, so that a holder of one shard's
// token cannot take another group's partitions. Its answers are cached by pod UID.
//
// Insecure accepts any claimed identity; it exists for local development and tests that
// have no pod-bound tokens, and must be chosen explicitly (--shard-auth=none).
package shardauth
