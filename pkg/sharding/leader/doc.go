// Package leader runs the coordinator's leader election with client-go's
// tools/leaderelection and a coordination.k8s.io/v1 Lease, and gives every new leader a
// term above all terms before it — the high bits of every handoff epoch, so epochs keep
// growing across leaders. The term is max(the Lease's transition count + 1, the highest
// term recorded + 1), recorded in a second Lease (TermStore) before the leader serves, so
// it keeps growing even when the election Lease is deleted and its count starts over.
//
// Shards' claims are never evidence that this leader was replaced: Verifier checks the
// Lease and the term record instead.
//
// A coordinator that loses leadership stops serving at once (its context is cancelled);
// the process is expected to exit and restart, as kube-controller-manager does, so that a
// stale leader can never issue another command.
package leader
