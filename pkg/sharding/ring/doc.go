// Package ring maps partitions to shards by consistent hashing with bounded
// loads (github.com/buraksezer/consistent v1.0.0).
//
// The assignment is a pure function of the member set: the same names in
// any order give the same map, so a new coordinator leader that learns the
// members from hellos computes exactly the assignment its predecessor had
// and moves nothing. Partition IDs come from package partition; the ring
// uses the library's own partition ownership with PartitionCount equal to
// ours, so consistent.GetPartitionOwner(int(id)) is the owner of id, and
// consistent.FindPartitionID(name) equals partition.Map.For(name).
//
// Bounded loads: no member gets more than ceil(P/N × Load) partitions, and
// adding a member moves about 1/(N+1) of the partitions. With
// ReplicationFactor 100 and Load 1.1 the design notes measured max/avg of
// 1.10–1.24 over 10,000 namespaces at 4–64 shards.
//
// The library panics with "not enough room to distribute partitions" when
// the capacity N × ceil(P/N × Load) is below P. Config.Validate requires
// Load ≥ 1, under which that never happens, and Assign still checks the
// exact condition (and recovers) so a future library change turns into an
// error, never into a crashed coordinator.
package ring
