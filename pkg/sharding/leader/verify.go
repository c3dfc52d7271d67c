package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Verifier looks in the API server for evidence that this coordinator no longer leads.
// A shard's word is not such evidence: any client with a valid certificate can claim an
// epoch of a newer term, and a leader that stepped down on the claim alone could be made
// to exit, again and again, by anybody. Only what the coordinators themselves write
// counts: the election Lease and the term record (TermStore).
type Verifier struct {
	// Leases reads the election Lease.
	Leases coordinationv1client.LeasesGetter
	// Namespace and Name are the election Lease's.
	Namespace, Name string
	// Identity is this candidate's, as given to Run.
	Identity string
	// Terms is the term record.
	Terms TermStore
}

// NewVerifier returns the Verifier of the candidate identity that Run campaigns for with
// the same options and client.
func NewVerifier(o *Options, client kubernetes.Interface, identity string) Verifier {
	return Verifier{
		Leases:    client.CoordinationV1(),
		Namespace: o.ResourceNamespace,
		Name:      o.ResourceName,
		Identity:  identity,
		Terms:     o.termStore(client),
	}
}

// Deposed returns a description of the evidence that the leader of term (this one) has
// been replaced: the election Lease is held by somebody else, or a higher term has been
// recorded. It returns "" when the API server shows neither; then err says what could
// not be read, if anything. A missing election Lease is no evidence: this leader's next
// renewal creates it again.
func (v Verifier) Deposed(ctx context.Context, term uint64) (evidence string, err error) {
	var found []string
	var errs []error
	lease, err := v.Leases.Leases(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("reading Lease %s/%s: %w", v.Namespace, v.Name, err))
	default:
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		if holder != v.Identity {
			found = append(found, fmt.Sprintf("Lease %s/%s is held by %q, not by this coordinator", v.Namespace, v.Name, holder))
		}
	}
	recorded, err := v.Terms.Read(ctx)
	switch {
	case err != nil:
		errs = append(errs, err)
	case recorded > term:
		found = append(found, fmt.Sprintf("term %d is recorded in Lease %s/%s, above this leader's term %d", recorded, v.Terms.Namespace, v.Terms.Name, term))
	}
	if len(found) > 0 {
		return strings.Join(found, "; "), nil
	}
	return "", errors.Join(errs...)
}
