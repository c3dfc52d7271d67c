// Package ownerrecord tests kshard's server-side fence (pkg/sharding/ownerrecord) on the
// real local control plane: the ValidatingAdmissionPolicy and its binding as the code
// builds them, the owner Labeler, the Fence and the dry-run Prober. Shards are played by impersonation (user system:serviceaccount:<ns>:<sa> with
// the authentication.kubernetes.io/pod-name extra, exactly what a shard's pod-bound
// token authenticates as), which the admin kubeconfig may do.
//
// It checks that the owner's writes pass, that another shard's are refused with a
// message naming the shard, the namespace and the partition, that moving a partition
// between owner Roles flips both, that other users and events are untouched, that a
// namespace of a partition nobody owns refuses the shard, that the record guard keeps the
// partition label and the owner Roles the coordinator's, and that the Labeler puts back a
// label or a RoleBinding removed by hand; and it measures how long the API server takes to
// enforce a new owner Role after the write returns, and the API writes a move costs (a few
// Role writes, whatever the namespaces).
package ownerrecord

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
