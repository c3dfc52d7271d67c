package ownerrecord

import (
	"context"
	"fmt"
	"strconv"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// reviewer asks the API server's authorizer, through LocalSubjectAccessReviews in
// kshard's namespace, what the fence policy will ask it: may the owner subject of a shard
// own a partition. The authorizer's RBAC view comes from the API server's informers, a
// moment behind etcd; a review answers from the same view admission uses.
type reviewer struct {
	client   kubernetes.Interface
	params   PolicyParams
	interval time.Duration
}

func (l *Labeler) reviewer() reviewer {
	return reviewer{client: l.kube, params: l.params, interval: 5 * time.Millisecond}
}

// owns reports whether the authorizer lets shard's owner subject own partition p.
func (r reviewer) owns(ctx context.Context, shard string, p partition.ID) (bool, error) {
	ns := r.params.Namespace
	review := &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			// What authorizer.serviceAccount(ns, name) in the policy's CEL asks as.
			User:   ServiceAccountUser(ns, OwnerRoleName(shard)),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Group: PartitionsGroup, Resource: PartitionsResource, Verb: OwnVerb,
				Name: strconv.FormatUint(uint64(p), 10),
			},
		},
	}
	got, err := r.client.AuthorizationV1().LocalSubjectAccessReviews(ns).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing whether shard %s owns partition %d: %w", shard, p, err)
	}
	return got.Status.Allowed, nil
}

// waitOwns reviews until shard owns p and the sentinel does not, and returns the number
// of reviews sent.
func (r reviewer) waitOwns(ctx context.Context, shard string, p partition.ID) (int, error) {
	n, sentinelOwns := 0, false
	err := wait.PollUntilContextCancel(ctx, r.interval, true, func(ctx context.Context) (bool, error) {
		n++
		if ok, err := r.owns(ctx, shard, p); err != nil || !ok {
			return false, err
		}
		n++
		ok, err := r.owns(ctx, SentinelShard, p)
		sentinelOwns = ok
		return !ok, err
	})
	switch {
	case err != nil && sentinelOwns:
		return n, fmt.Errorf("the authorizer lets %s own partition %d too, so the owner record grants every shard "+
			"everything: a binding gives the verb %q on %s.%s to a group or a wildcard (system:serviceaccounts?): %w",
			ServiceAccountUser(r.params.Namespace, OwnerRoleName(SentinelShard)), p, OwnVerb, PartitionsResource, PartitionsGroup, err)
	case err != nil:
		return n, fmt.Errorf("shard %s not yet allowed partition %d after %d reviews: %w", shard, p, n, err)
	}
	return n, nil
}
