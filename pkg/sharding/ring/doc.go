// Package ring maps partitions to shards: consistent hashing over
// github.com/buraksezer/consistent v1.0.0's ring, with quotas, sticky to
// the current owners.
//
// The target is a function of the member set and of who owns each
// partition now (AssignFrom): every member's quota is floor(P/N) or
// ceil(P/N), a partition stays with its current owner while that owner is
// a member within its quota, and every other partition goes to the first
// member with room in its preference order. Partition IDs come from
// package partition; a partition's preference order is the library's ring
// with PartitionCount equal to ours: the clockwise walk from the hash of
// its ID over every member's ReplicationFactor virtual nodes, so the
// library's FindPartitionID(name) equals partition.Map.For(name) and, when
// no member is full, the library's GetPartitionOwner(int(id)) is the first
// member of that walk (TestPreferenceMatchesLibrary).
//
// Why sticky, not the library's bounded-load assignment, which is a pure
// function of the member set: its cap ceil(P/N × Load) and which members
// are full by the time each partition is placed both change with the
// membership, so one join or leave cascades among members that stay. At
// 1,000 members and 4,096 partitions it moved 1.78× the ideal P/(N+1) per
// join and 1.65× the leaver's share per leave (docs/performance.md,
// "Coordinator at scale"). Here a join moves only the new member's quota,
// all of it to the new member, and a leave moves only the leaver's
// partitions. Balance is tighter too: no member holds more than ceil(P/N),
// and none holds nothing while P ≥ N (the library's cap left 7 of 1,000
// members without a partition at 4,096). Config.Load no longer affects the
// assignment.
//
// What the coordinator relies on (tested): the target does not depend on
// the order of members; it is a fixed point, AssignFrom(m, AssignFrom(m,
// c)) = AssignFrom(m, c), so a new leader that adopts the owners the shards
// report computes the assignment they already have and moves nothing; and
// every member gets exactly its quota. The assignment depends on history:
// two clusters with the same members may differ, which is why the
// coordinator passes the owners it knows (handoff.RingRequest) and never
// recomputes a target from the members alone once anything is owned. With
// no current owners (a first start) the result is the quota placement in
// preference order.
//
// Upgrading from a build whose target was the library's assignment: the
// first leader of this build keeps what every member holds up to its new
// quota and moves only the rest, to members below theirs
// (TestUpgradeFromLibrary: 4.2 % of 4,096 partitions at 16 members, 5.4 %
// at 100, 11.2 % at 1,000 in a one-off run). Leadership moving back to an
// older build moves partitions back to the library's assignment.
//
// Built is the ring of one member set, built once, for package balance,
// which places partitions that carry work by cost and asks the ring only
// for preference: Prefer (a partition's preference order), Distance (how
// early a member comes in it, which is also how much a member prefers a
// partition: the order AssignFrom keeps by when a member holds too many)
// and AssignFrom restricted to some members and partitions (the count
// quotas balance keeps for partitions that carry nothing). AssignFrom is
// Build followed by Built.AssignFrom over everything.
//
// Why the ring is built in one sort, not with the library: its New adds
// members one at a time and re-sorts the whole ring of members ×
// ReplicationFactor virtual nodes after each, O(N²·R·log(N·R)). At 4,096
// partitions that took 24 s for 1,000 members and about 10 minutes for
// 5,000; one sort takes tens of milliseconds (BenchmarkAssignMembers).
package ring
