package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// client-go refuses a renew deadline up to its jitter factor times the retry period,
	// and keeps the Lease duration in whole seconds.
	if minRenew := time.Duration(leaderelection.JitterFactor * float64(o.RetryPeriod)); o.RenewDeadline <= minRenew {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than %v × --leader-elect-retry-period (%s) = %s",
			o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod, minRenew))
	}
	if o.RetryPeriod <= 0 {
		errs = append(errs, errors.New("--leader-elect-retry-period must be positive"))
	}
	if o.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be at least 1s: the Lease records it in whole seconds", o.LeaseDuration))
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
	// above every term led before, also across a deletion of the Lease: it is recorded
	// (TermStore) before OnLeading is called. tenure says, at any moment, whether the
	// leadership is still certain by this process's clock: ctx ends only once the elector
	// notices a loss, which a process stopped past its Lease does late (see Tenure).
	OnLeading func(ctx context.Context, term uint64, tenure *Tenure)
	// OnNewLeader reports the current leader's identity (also for followers).
	OnNewLeader func(identity string)
	// OnStopped runs when leadership is lost or never gained before ctx ended.
	OnStopped func()
	// OnLeaseAnswered, when set, is called with the time of every read or write of the
	// Lease that succeeded (every retry period while the API server answers, leader or
	// not): what a readiness check needs to tell a candidate that can still take over from
	// one that lost the API server. Not called with leader election disabled.
	OnLeaseAnswered func(at time.Time)
}

// Run campaigns until ctx ends. On winning the Lease it records a new term (TermStore:
// max(the Lease's transitions + 1, the highest term recorded + 1)) and only then calls
// OnLeading; if the term cannot be recorded within the renew deadline it does not lead:
// it gives the Lease up and returns the error, so the process exits and another replica
// (or its restart) tries.
//
// With leader election disabled it leads at once with a term taken from the wall clock:
// the next whole second, waited for, so that a restart within the same second still gets
// a higher term (as long as the clock does not step back).
func Run(ctx context.Context, o *Options, client kubernetes.Interface, identity string, cb Callbacks) error {
	log := klog.FromContext(ctx)
	if !o.Enabled {
		log.Info("leader election disabled: leading alone", "identity", identity)
		term, wait := clockTerm(time.Now())
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
		if cb.OnNewLeader != nil {
			cb.OnNewLeader(identity)
		}
		cb.OnLeading(ctx, term, unbounded())
		if cb.OnStopped != nil {
			cb.OnStopped()
		}
		return nil
	}
	lock := newTenureLock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(o.ResourceNamespace, o.ResourceName),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}, o.RenewDeadline, time.Now)
	lock.answered = cb.OnLeaseAnswered
	terms := o.termStore(client)
	runCtx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				term, err := newTerm(ctx, client, o, terms)
				if err != nil {
					log.Error(err, "won the Lease but cannot record a new leader term: giving the Lease up without leading",
						"identity", identity, "termLease", terms.Namespace+"/"+terms.Name)
					giveUp(fmt.Errorf("not leading: %w", err))
					return
				}
				log.Info("became leader", "identity", identity, "term", term)
				cb.OnLeading(ctx, term, lock.tenure)
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
	le.Run(runCtx)
	if runCtx.Err() != nil && ctx.Err() == nil {
		return context.Cause(runCtx)
	}
	return nil
}

// newTerm reads the election Lease just won and records the next term, within the renew
// deadline. It reads the Lease itself rather than through the elector's lock, whose
// cached copy the renewals write concurrently.
func newTerm(ctx context.Context, client kubernetes.Interface, o *Options, terms TermStore) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.RenewDeadline)
	defer cancel()
	lease, err := client.CoordinationV1().Leases(o.ResourceNamespace).Get(ctx, o.ResourceName, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("reading the Lease after winning it: %w", err)
	}
	transitions := int32(0)
	if lease.Spec.LeaseTransitions != nil {
		transitions = max(*lease.Spec.LeaseTransitions, 0)
	}
	return terms.Advance(ctx, uint64(transitions)+1)
}

// clockTerm is the term of a coordinator without leader election at now: the next whole
// Unix second, and how long to wait for it. A predecessor led from its term's second on,
// which was before now, so the second after now is above its term.
func clockTerm(now time.Time) (term uint64, wait time.Duration) {
	next := now.Truncate(time.Second).Add(time.Second)
	return uint64(next.Unix()), next.Sub(now)
}

// termStore is the term record of the election Lease o names.
func (o *Options) termStore(client kubernetes.Interface) TermStore {
	return TermStore{Leases: client.CoordinationV1(), Namespace: o.ResourceNamespace, Name: TermLeaseName(o.ResourceName)}
}
