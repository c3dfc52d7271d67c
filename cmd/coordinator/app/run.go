// Package app is the coordinator command: flags, wiring and lifecycle.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/httpserver"
	"github.com/kshard/kshard/pkg/logging"
	"github.com/kshard/kshard/pkg/metrics/promutil"
	"github.com/kshard/kshard/pkg/metrics/restmetrics"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/transport"
	"github.com/kshard/kshard/pkg/version"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// Main runs the coordinator (or its `assignments` subcommand) and returns the exit code.
func Main(args []string) int {
	if len(args) > 0 && args[0] == "assignments" {
		return assignmentsMain(args[1:])
	}
	o := NewOptions()
	fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "invalid flags:\n%v\n", err)
		return 2
	}
	log, flush, err := logging.New(*o.Logging, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer flush()
	log = log.WithValues("coordinator", o.ID)
	ctx, cancel := signal.NotifyContext(klog.NewContext(context.Background(), log), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	code, err := run(ctx, o)
	if err != nil {
		log.Error(err, "coordinator failed")
	}
	return code
}

func run(ctx context.Context, o *Options) (int, error) {
	log := klog.FromContext(ctx)
	cfg, err := o.RESTConfig("kshard-coordinator/" + version.Version)
	if err != nil {
		return 1, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 1, err
	}

	registry := prometheus.NewRegistry()
	if err := promutil.Register(registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return 1, err
	}
	if err := restmetrics.Register(registry); err != nil {
		return 1, err
	}
	metrics, err := coordinatorrpc.NewMetrics(registry)
	if err != nil {
		return 1, err
	}

	leadCtx, stepDown := context.WithCancelCause(ctx)
	defer stepDown(nil)
	auth, err := o.ShardAuth.Authenticator(cfg, log)
	if err != nil {
		return 2, err
	}
	groups, err := o.ShardAuth.GroupVerifier(cfg)
	if err != nil {
		return 2, err
	}
	// A shard's claim of a newer term is checked against the Lease before stepping down.
	identity := leader.Identity(o.ID, o.AdvertiseAddress)
	verifier := leader.NewVerifier(o.Leader, client, identity)
	lead := &leadership{log: log, stepDown: stepDown, termAbove: func(ctx context.Context, seen uint64) (uint64, error) {
		return o.Leader.TermAbove(ctx, client, seen)
	}}
	pm, err := partition.NewMap(o.Handoff.PartitionCount)
	if err != nil {
		return 2, err
	}
	fence, labeler, err := o.Fence.start(ctx, cfg, o.ShardAuth, pm, fenceCheck{client: client, registry: registry, id: o.ID,
		leaseNamespace: o.Leader.ResourceNamespace, leaseName: o.Leader.ResourceName}, log)
	if err != nil {
		return 2, err
	}
	hc := o.handoffConfig()
	hc.OwnerRecord, hc.SeizeAfter = fence != nil, o.Fence.seizeAfter()
	var record coordinatorrpc.OwnerRecord
	if fence != nil {
		record = fence
	}
	srv, err := coordinatorrpc.New(coordinatorrpc.Options{
		Config:  hc,
		Record:  record,
		Metrics: metrics,
		StepDown: func(reason string) {
			if reason == coordinatorrpc.ReasonEpochsExhausted {
				stepDown(errors.New(reason))
				return
			}
			// A shard holds epochs of a newer term: a newer leader (step down), or a term
			// that outlived its record (lead again above it).
			if o.Leader.Enabled && confirmStepDown(leadCtx, log, verifier, lead.term.Load(), o.Leader.RenewDeadline, reason, stepDown) {
				return
			}
			shard, claim := lead.srv.NewerTermClaim()
			lead.skipPast(shard, claim, time.Now())
		},
		Authenticator:     auth,
		GroupVerifier:     groups,
		MaxSessions:       coordinatorrpc.SessionsForShards(o.ShardAuth.MaxShards),
		MaxPendingPerPeer: o.ShardAuth.MaxShardsPerAddress,
		WaitForPlacement:  o.Placement.Mode == PlacementLoad,
	}, log)
	if err != nil {
		return 2, err
	}
	lead.srv = srv
	if err := o.Placement.start(ctx, cfg, pm, labeler, srv.SetPlacement, log); err != nil {
		return 2, err
	}

	creds, err := transport.ServerCredentials(o.TLS)
	if err != nil {
		return 1, err
	}
	// Keepalive, then the session caps (message size from the partition count, streams
	// per connection).
	g := grpc.NewServer(append(append(transport.ServerOptions(), srv.GRPCOptions()...), grpc.Creds(creds))...)
	srv.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus(kshardv1.Coordinator_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	l, err := net.Listen("tcp", o.GRPCBindAddress)
	if err != nil {
		return 1, fmt.Errorf("listening for gRPC on %s: %w", o.GRPCBindAddress, err)
	}
	go func() {
		if err := g.Serve(l); err != nil {
			log.Error(err, "gRPC server stopped")
		}
	}()
	defer g.Stop()
	log.Info("gRPC session service listening", "addr", l.Addr().String(), "advertise", o.AdvertiseAddress,
		"tls", !o.TLS.Insecure, "mutualTLS", o.TLS.CAFile != "", "shardAuth", o.ShardAuth.Mode,
		"maxSessions", coordinatorrpc.SessionsForShards(o.ShardAuth.MaxShards), "maxShardsPerAddress", o.ShardAuth.MaxShardsPerAddress, "maxMessageBytes", coordinatorrpc.MaxMessageSize(o.Handoff.PartitionCount))

	hsrv := httpserver.New(httpserver.Options{Addr: o.HTTPBindAddress, Gatherer: registry, EnablePprof: o.EnablePprof})
	hsrv.AddLivez("ping", func() error { return nil })
	// Holding the Lease without serving past the owner record's claim timeout (after
	// which Lead gives the Lease up itself) means this replica is wedged.
	hsrv.AddLivez("leadership", func() error { return lead.stuck(time.Now(), coordinatorrpc.DefaultClaimTimeout+o.Leader.LeaseDuration) })
	hsrv.AddReadyz("leader", func() error {
		if !srv.Leading() {
			return errors.New("not the leader")
		}
		return nil
	})
	// A replica that has seen who leads (itself or another) and still reaches the Lease can
	// take over: the chart's probe (/readyz?exclude=leader) counts such a follower as
	// Ready, so that rollouts and the PodDisruptionBudget work with a standby.
	lease := &leaseReadiness{election: o.Leader.Enabled, within: o.Leader.LeaseDuration}
	hsrv.AddReadyz("lease", func() error { return lease.check(time.Now()) })
	hsrv.Handle("/assignments", srv.AssignmentsHandler())
	if err := hsrv.Start(ctx); err != nil {
		return 1, err
	}

	lost := false
	err = leader.Run(leadCtx, o.Leader, client, identity, leader.Callbacks{
		OnLeading: func(ctx context.Context, t uint64, tenure *leader.Tenure) {
			lease.seen.Store(true)
			hs.SetServingStatus(kshardv1.Coordinator_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
			srv.SetLeaderAddress(o.AdvertiseAddress)
			lead.run(ctx, t, tenure)
			hs.SetServingStatus(kshardv1.Coordinator_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
		},
		OnNewLeader: func(id string) {
			lease.seen.Store(true)
			log.Info("leader observed", "leader", id)
			if id != identity {
				srv.SetLeaderAddress(leader.AddressOf(id))
			}
		},
		OnStopped:       func() { lost = ctx.Err() == nil },
		OnLeaseAnswered: lease.answered,
	})
	if err != nil {
		return 1, err
	}
	if lost {
		// A replica that led once exits, so its next incarnation is a new Lease holder
		// (and so a new term), as kube-controller-manager does.
		cause := context.Cause(leadCtx)
		return 1, fmt.Errorf("leadership lost: %v", cause)
	}
	log.Info("coordinator stopped")
	return 0, nil
}
