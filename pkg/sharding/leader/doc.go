// Package leader runs the coordinator's leader election with client-go's
// tools/leaderelection and a coordination.k8s.io/v1 Lease, and turns the Lease's
// transition count into the leader term that forms the high bits of every handoff epoch,
// so epochs keep growing across leaders.
//
// A coordinator that loses leadership stops serving at once (its context is cancelled);
// the process is expected to exit and restart, as kube-controller-manager does, so that a
// stale leader can never issue another command.
package leader
