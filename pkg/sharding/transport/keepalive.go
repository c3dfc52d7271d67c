package transport

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive timings shared by both sides. The client pings an idle connection every
// ClientPingInterval; the server tolerates pings down to MinClientPingInterval, which is
// below ClientPingInterval so the two can never disagree.
const (
	ClientPingInterval    = 10 * time.Second
	PingTimeout           = 5 * time.Second
	MinClientPingInterval = 5 * time.Second
	ServerPingInterval    = 30 * time.Second
)

// ServerOptions returns the server's keepalive options.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             MinClientPingInterval,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    ServerPingInterval,
			Timeout: PingTimeout,
		}),
	}
}

// DialOptions returns the client's keepalive options.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                ClientPingInterval,
			Timeout:             PingTimeout,
			PermitWithoutStream: true,
		}),
	}
}
