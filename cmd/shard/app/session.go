package app

import (
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
