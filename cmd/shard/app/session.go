package app

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/shardruntime"
)

// sessionHandler is the runtime as the session client sees it: the runtime knows nothing
// of the wire, so its Stats are put into the protocol's here.
type sessionHandler struct{ *shardruntime.Runtime }

var _ shardrpc.Handler = sessionHandler{}

// Stats implements shardrpc.Handler.
func (h sessionHandler) Stats() protocol.Stats {
	s := h.Runtime.Stats()
	return protocol.Stats{AcquiredPartitions: uint32(s.AcquiredPartitions), PreparedPartitions: uint32(s.PreparedPartitions),
		Namespaces: uint64(s.Namespaces), CachedObjects: uint64(s.CachedObjects), QueueDepth: uint64(s.QueueDepth), Fenced: s.Fenced}
}

// leaseHolderAddress returns shardrpc.Options.LeaderAddress for --coordinator-lease
// (namespace/name, validated): the address the Lease's holder advertises in its identity
// (leader.Identity), "" while nobody holds it. An address is only ever dialed with the
// shard's TLS credentials, which verify the coordinator's certificate: whoever could write
// the Lease could point shards elsewhere, not make them trust it.
func leaseHolderAddress(client kubernetes.Interface, namespace, name string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		l, err := client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return "", nil
		}
		addr := leader.AddressOf(*l.Spec.HolderIdentity)
		if addr == "" {
			return "", errors.New("the Lease holder identity names no address: " + *l.Spec.HolderIdentity)
		}
		return addr, nil
	}
}
