// Package invariant checks the invariants of the workload stress test
// (test/workloadstress) from the events of the test's own pod and PodDisruptionBudget
// watches, at every instant the test observes, so that a failure names the object, the
// invariant and the instant (the resourceVersion of the event that broke it, and when the
// test saw it):
//
//  1. StatefulSet ordinals: never two pods of one StatefulSet ordinal at once (a pod
//     counts from its creation until its deletion is observed, terminating or not).
//     At the end, Checker.Recreations tells whether an ordinal was created twice at one
//     revision; the only explanation accepted is kwok's: its pod-delete stage may play
//     twice for one pod and delete, by name, the pod just created under it (a forced
//     delete, seen as a first deletion with grace period 0, where the controllers delete
//     with the template's grace period). The stress test's pods are exempt from that
//     stage (hack/kwok-stages/pod-delete.yaml), so there it expects none.
//  2. DaemonSet surge: on no node more live pods (not being deleted, not terminal) of a
//     DaemonSet than 1 + maxSurge allows (1 without surge, 2 with), and never more than
//     maxSurge nodes that run an old pod beside a new one that is not Ready. That is the
//     bound upstream's rolling update keeps (pkg/controller/daemon/update.go): it counts
//     the nodes whose new pod is not yet available and starts new pods beside available
//     old ones on at most maxSurge minus that many; it replaces an old pod that is not
//     available at once, without counting it, so the bound holds only while every old
//     pod is available, which the test arranges (a surging DaemonSet's next rollout
//     starts once the previous one is complete). The total above the desired count is
//     not bounded by upstream (it creates the next nodes' pods before it deletes the old
//     pod of a node whose new pod became available): reported, not checked.
//  3. PodDisruptionBudget status: every status the disruption controller writes must be
//     the one upstream computes from some view of the budget's pods that the controller
//     could have had: a view at a resourceVersion below the status write, and not older
//     than the view of the budget's previous status (a controller's cache only moves
//     forward). currentHealthy and expectedPods equal that view's counts, desiredHealthy
//     follows from the spec of status.observedGeneration, disruptionsAllowed is
//     currentHealthy - desiredHealthy (0 when not positive or when no pod is expected),
//     so disruptionsAllowed never exceeds what the healthy pods of that view allow. The
//     check waits until the pod watch has passed the status's resourceVersion, so that
//     it never compares with a view older than the controller's. Comparing with the view
//     at the instant the status is observed instead is violated by any implementation,
//     upstream's included: a pod deleted between the controller's read and its write (or
//     after the write, before the next one) lowers the healthy count under a status
//     already written. Those instants are counted and timed (Report.PDBLag), not failed.
package invariant
