package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Options are kube-controller-manager's leader election flags.
type Options struct {
	Enabled           bool
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	ResourceName      string
	ResourceNamespace string
}

// NewOptions returns kube-controller-manager's defaults.
func NewOptions() *Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "kube-system"
	}
	return &Options{
		Enabled:           true,
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		ResourceName:      "kshard-coordinator",
		ResourceNamespace: ns,
	}
}

// AddFlags registers the --leader-elect* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "leader-elect", o.Enabled, "elect one leader among coordinator replicas through a Lease; disable only for a single local instance")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long followers wait after the last renewal before taking over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader keeps retrying a renewal before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often candidates try to acquire or renew the Lease")
	fs.StringVar(&o.ResourceName, "leader-elect-resource-name", o.ResourceName, "name of the Lease")
	fs.StringVar(&o.ResourceNamespace, "leader-elect-resource-namespace", o.ResourceNamespace, "namespace of the Lease (default $POD_NAMESPACE or kube-system)")
}

// Validate checks the timings the way client-go would, but as a flag error.
func (o *Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline))
	}
	if o.RenewDeadline <= o.RetryPeriod {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than --leader-elect-retry-period (%s)", o.RenewDeadline, o.RetryPeriod))
	}
	if o.RetryPeriod <= 0 {
		errs = append(errs, errors.New("--leader-elect-retry-period must be positive"))
	}
	if o.ResourceName == "" || o.ResourceNamespace == "" {
		errs = append(errs, errors.New("--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty"))
	}
	return errors.Join(errs...)
}

// Identity is this candidate: its name (the pod name) plus the address shards reach it at,
// plus a random suffix so that a restarted process is a new holder and bumps the Lease's
// transition count. Followers parse the address out of the holder identity to point
// shards at the leader.
func Identity(name, advertiseAddr string) string {
	return name + "@" + advertiseAddr + "#" + uuid.NewString()[:8]
}

// AddressOf returns the advertised address inside an identity made by Identity.
func AddressOf(identity string) string {
	at, hash := -1, len(identity)
	for i := len(identity) - 1; i >= 0; i-- {
		switch {
		case identity[i] == '#' && hash == len(identity):
			hash = i
		case identity[i] == '@':
			at = i
		}
		if at >= 0 {
			break
		}
	}
	if at < 0 || at >= hash {
		return ""
	}
	return identity[at+1 : hash]
}

// Callbacks are called as leadership changes.
type Callbacks struct {
	// OnLeading runs while this process leads; ctx ends when leadership is lost. term is
	// one more than the Lease's transition count, so it grows with every new leader.
	OnLeading func(ctx context.Context, term uint64)
	// OnNewLeader reports the current leader's identity (also for followers).
	OnNewLeader func(identity string)
	// OnStopped runs when leadership is lost or never gained before ctx ended.
	OnStopped func()
}

// Run campaigns until ctx ends. With leader election disabled it leads at once with a
// term taken from the wall clock (seconds), which still grows across restarts.
func Run(ctx context.Context, o *Options, client kubernetes.Interface, identity string, cb Callbacks) error {
	log := klog.FromContext(ctx)
	if !o.Enabled {
		log.Info("leader election disabled: leading alone", "identity", identity)
		if cb.OnNewLeader != nil {
			cb.OnNewLeader(identity)
		}
		cb.OnLeading(ctx, uint64(time.Now().Unix()))
		if cb.OnStopped != nil {
			cb.OnStopped()
		}
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(o.ResourceNamespace, o.ResourceName),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				rec, _, err := lock.Get(ctx)
				if err != nil {
					log.Error(err, "reading the Lease after winning it; giving up leadership")
					return
				}
				term := uint64(rec.LeaderTransitions) + 1
				log.Info("became leader", "identity", identity, "term", term)
				cb.OnLeading(ctx, term)
			},
			OnStoppedLeading: func() {
				log.Info("stopped leading", "identity", identity)
				if cb.OnStopped != nil {
					cb.OnStopped()
				}
			},
			OnNewLeader: func(id string) {
				if cb.OnNewLeader != nil {
					cb.OnNewLeader(id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	return nil
}
