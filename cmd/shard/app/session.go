package app

import (
	"context"
	"errors"
	"math"

	"github.com/go-logr/logr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
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

// loadReporter is the runtime's load as the session reports it to the coordinator
// (docs/design-placement.md §1): the meter's bias-corrected rates and the caches' sizes
// of the partitions, in the protocol's units. It also gives the meter the half-life and
// reconcile weight each Welcome carries, so every shard measures alike.
type loadReporter struct {
	runtime *shardruntime.Runtime
	meter   *loadmeter.Meter
	log     logr.Logger
}

var (
	_ shardrpc.LoadReporter         = loadReporter{}
	_ shardrpc.LoadSettingsReceiver = loadReporter{}
)

// Load implements shardrpc.LoadReporter.
func (r loadReporter) Load() protocol.LoadReport {
	l := r.runtime.Load()
	out := protocol.LoadReport{LimiterWaitPermille: milli(l.LimiterWait)}
	for _, p := range l.Partitions {
		out.Partitions = append(out.Partitions, protocol.PartitionLoad{
			Partition:  p.Partition,
			LoadMilli:  milli(p.Load),
			Objects:    uint32(min(p.Objects, protocol.MaxLoadObjects)),
			AgeSeconds: uint32(min(p.Age.Seconds(), protocol.MaxLoadAgeSeconds)),
		})
	}
	return out
}

// milli is x × 1000 rounded, within uint32 (a rate is never negative; NaN is 0).
func milli(x float64) uint32 {
	v := math.Round(x * 1000)
	switch {
	case !(v > 0):
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// SetLoadSettings implements shardrpc.LoadSettingsReceiver. Settings with no reports
// (an older coordinator's) leave the meter as it is.
func (r loadReporter) SetLoadSettings(s protocol.LoadSettings) {
	if s.ReportInterval == 0 {
		return
	}
	if err := r.meter.SetSettings(s.HalfLife, s.ReconcileWeight, s.ReportInterval); err != nil {
		r.log.Error(err, "Ignoring the coordinator's load settings", "halfLife", s.HalfLife, "reconcileWeight", s.ReconcileWeight, "reportInterval", s.ReportInterval)
	}
}
