package leader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
)

// TermAnnotation is the annotation of the term Lease that holds the highest term any
// coordinator has led, in decimal.
const TermAnnotation = "kshard.io/leader-term"

// TermLeaseName is the name of the Lease that records the highest leader term, next to
// the election Lease named electionLease.
func TermLeaseName(electionLease string) string { return electionLease + "-term" }

// TermStore records the highest leader term in its own object, because the election
// Lease cannot: its transition count starts again at 0 when the Lease is deleted (by an
// operator, a namespace clean-up, a restore), and a leader that took its term from it
// alone would go back to term 1 while shards hold epochs of the newer terms before. Such
// a leader refuses every shard that reports them and, told of a newer term, steps down —
// and its successor does the same, in a loop.
//
// The record is a second coordination.k8s.io Lease, named TermLeaseName(election Lease),
// in the same namespace, with the term in TermAnnotation. A Lease rather than a ConfigMap:
// the coordinator's RBAC already covers Leases in that namespace, so it gains one
// resource name on an existing rule instead of access to another resource type (and
// ConfigMaps are where configuration lives). Its spec stays empty: nobody holds it, so
// nothing that looks for Lease holders takes it for a live leader.
//
// Only a coordinator that has just won the election Lease writes it (Advance), before it
// serves; the write carries the resourceVersion it read, so two writers can never both
// record the same term.
type TermStore struct {
	Leases    coordinationv1client.LeasesGetter
	Namespace string
	Name      string
}

// Read returns the highest term recorded, 0 when none is.
func (s TermStore) Read(ctx context.Context) (uint64, error) {
	lease, err := s.Leases.Leases(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the leader term from Lease %s/%s: %w", s.Namespace, s.Name, err)
	}
	return s.parse(lease)
}

// Advance records and returns the term of a leader that has just won the election: at
// least atLeast (the election Lease's transitions + 1), and above every term recorded
// before. A conflicting write (somebody else wrote in between) is retried on what is
// then recorded; any other failure is returned, and the caller must not lead.
func (s TermStore) Advance(ctx context.Context, atLeast uint64) (uint64, error) {
	if atLeast == 0 {
		atLeast = 1
	}
	var term uint64
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, retriable, func() error {
		leases := s.Leases.Leases(s.Namespace)
		lease, err := leases.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if term, err = checkTerm(atLeast); err != nil {
				return err
			}
			_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Namespace: s.Namespace, Name: s.Name,
				Annotations: map[string]string{TermAnnotation: strconv.FormatUint(term, 10)},
			}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		recorded, err := s.parse(lease)
		if err != nil {
			return err
		}
		if term, err = checkTerm(max(atLeast, recorded+1)); err != nil {
			return err
		}
		lease = lease.DeepCopy()
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[TermAnnotation] = strconv.FormatUint(term, 10)
		// The update carries the resourceVersion just read: optimistic concurrency.
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("recording the leader term in Lease %s/%s: %w", s.Namespace, s.Name, err)
	}
	return term, nil
}

// ErrTermsExhausted is returned when the next term would not fit the 32 bits an epoch
// gives it.
var ErrTermsExhausted = errors.New("leader terms exhausted")

func checkTerm(term uint64) (uint64, error) {
	if term > math.MaxUint32 {
		return 0, fmt.Errorf("%w: term %d does not fit the 32 bits of an epoch", ErrTermsExhausted, term)
	}
	return term, nil
}

func (s TermStore) parse(lease *coordinationv1.Lease) (uint64, error) {
	v, ok := lease.Annotations[TermAnnotation]
	if !ok {
		return 0, nil
	}
	term, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		// Guessing could hand out a term that shards already hold: refuse, and say how to
		// repair it.
		return 0, fmt.Errorf("annotation %s=%q of Lease %s/%s is not a term: set it to at least the last kshard_coordinator_term", TermAnnotation, v, s.Namespace, s.Name)
	}
	return term, nil
}

// MaxTermAhead is how far past the current Unix time a term may be and still have been
// led by some coordinator: clock-terms (leader election off) are the Unix second a leader
// started, every other term counts leaderships (the election Lease's transitions, or one
// more than the highest recorded), so no leader can yet have held a term above now plus
// the leaderships since the last clock-term; a week leaves room for clock skew between
// machines and for many failovers.
const MaxTermAhead = 7 * 24 * time.Hour

// PlausibleTerm reports whether some coordinator can have led term by now. A term found
// where earlier leaderships leave theirs (the owner record's namespaces, a shard's
// epochs) is advanced past (Options.TermAbove) only when it is plausible: advancing past
// a forged term near 2³² would exhaust the 32 bits an epoch gives terms, and a forger
// could push every later leader there. A plausible forgery costs at most the terms up to
// the current Unix time, which clock-terms spend anyway.
func PlausibleTerm(term uint64, now time.Time) bool {
	ceiling := now.Add(MaxTermAhead).Unix()
	return ceiling > 0 && term <= uint64(ceiling)
}

// TermAbove records and returns a term above seen for the leader of this election (which
// must hold the Lease): at least seen+1 and above every term recorded, through the
// TermStore, so that every later leader is above it too. Without leader election there is
// no record: the term is seen+1, or the clock-term of now if that is higher.
func (o *Options) TermAbove(ctx context.Context, client kubernetes.Interface, seen uint64) (uint64, error) {
	if !o.Enabled {
		term, _ := clockTerm(time.Now())
		return checkTerm(max(term, seen+1))
	}
	return o.termStore(client).Advance(ctx, seen+1)
}
