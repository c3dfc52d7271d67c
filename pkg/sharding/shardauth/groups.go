package shardauth

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// GroupLabel is the label of a shard pod that names its shard group (docs/design-placement.md
// §3): the chart sets it on the pods of each shardGroups Deployment, beside their
// --shard-group. A pod without it is in the default group.
const GroupLabel = "kshard.io/shard-group"

// Reasons of group refusals; they label the coordinator's auth metric with the others.
const (
	// ReasonGroupMismatch: the hello claims a group its pod's GroupLabel does not name.
	ReasonGroupMismatch = "group_mismatch"
	// ReasonPodUIDMismatch: the pod of the token's pod name is not the pod the token is
	// bound to (replaced since, or gone), or the token names no pod UID.
	ReasonPodUIDMismatch = "pod_uid_mismatch"
	// ReasonPodLookupFailed: the coordinator could not read the pod (the API server
	// failed or refused; it needs get on pods in the shards' namespace).
	ReasonPodLookupFailed = "pod_lookup_failed"
)

// GroupVerifier checks the shard group a session's hello claims against what the
// stream's verified identity may claim. A refusal is an *Error.
type GroupVerifier interface {
	VerifyGroup(ctx context.Context, id Identity, claimed string) error
}

// Defaults of PodGroupsOptions.
const (
	// DefaultGroupCacheTTL is how long a pod's group is reused by its UID. A pod's group
	// is its Deployment's and comes with the pod; a label changed by hand on a running pod
	// is seen within this long.
	DefaultGroupCacheTTL = time.Minute
	// DefaultGroupCacheSize bounds the cached pods (one per live shard pod is enough).
	DefaultGroupCacheSize = 4096
	// DefaultGroupLookupTimeout bounds one pod GET.
	DefaultGroupLookupTimeout = 10 * time.Second
)

// PodGroupsOptions configure PodGroups.
type PodGroupsOptions struct {
	// Client reads pods (clientset.CoreV1()); the coordinator needs get on pods in
	// Namespace.
	Client corev1client.PodsGetter
	// Namespace is the shards' namespace: their ServiceAccount's, which a pod can only use
	// in its own namespace.
	Namespace string
	// CacheTTL, CacheSize and LookupTimeout default to the constants above.
	CacheTTL      time.Duration
	CacheSize     int
	LookupTimeout time.Duration
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

// PodGroups verifies a shard's group claim by its pod: the pod named by the verified
// identity (the token's pod name, which is the shard ID), in the shards' namespace, must
// be the pod the token is bound to (its UID is the token's pod-uid extra: a pod deleted
// and created again under the same name is another pod) and must carry GroupLabel with
// the claimed group, or none for the default group. The pod's group is cached by its UID.
//
// Against whom: a holder of a shard's coordinator token (whose audience the API server
// refuses, so it cannot change any pod) can open that shard's session only in the group
// its pod is in, not take a dedicated group's pinned partitions. Whoever may change pod
// labels in the shards' namespace, or create pods there with the shard ServiceAccount,
// can put a pod in any group: the group is only as strong as those permissions.
type PodGroups struct {
	opts  PodGroupsOptions
	cache *utilcache.LRUExpireCache // pod UID → its group
}

// NewPodGroups validates the options.
func NewPodGroups(opts PodGroupsOptions) (*PodGroups, error) {
	if opts.Client == nil {
		return nil, errors.New("shardauth: PodGroupsOptions.Client is required")
	}
	if opts.Namespace == "" {
		return nil, errors.New("shardauth: the shards' namespace is required")
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultGroupCacheTTL
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultGroupCacheSize
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = DefaultGroupLookupTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &PodGroups{opts: opts, cache: utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, clockFunc(opts.Now))}, nil
}

// VerifyGroup accepts claimed when id's pod carries it (see PodGroups). It reads the pod
// only when its UID's group is not cached; a failed read is not cached.
func (g *PodGroups) VerifyGroup(ctx context.Context, id Identity, claimed string) error {
	if id.PodUID == "" {
		return refuse(codes.PermissionDenied, ReasonPodUIDMismatch,
			"the token of shard %q names no pod UID (no %s extra): mount a projected ServiceAccount token", id.Shard, ExtraPodUID)
	}
	group, ok := g.cached(id.PodUID)
	if !ok {
		var err error
		if group, err = g.lookup(ctx, id); err != nil {
			return err
		}
	}
	if group != claimed {
		return refuse(codes.PermissionDenied, ReasonGroupMismatch,
			"shard %q claims shard group %s, but its pod %s/%s is in %s (label %s): run the shard with --shard-group=%s, or label its pod",
			id.Shard, groupName(claimed), g.opts.Namespace, id.Shard, groupName(group), GroupLabel, group)
	}
	return nil
}

func (g *PodGroups) cached(uid string) (string, bool) {
	v, ok := g.cache.Get(uid)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// lookup reads id's pod, checks its UID and caches its group.
func (g *PodGroups) lookup(ctx context.Context, id Identity) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.LookupTimeout)
	defer cancel()
	pod, err := g.opts.Client.Pods(g.opts.Namespace).Get(ctx, id.Shard, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", refuse(codes.PermissionDenied, ReasonPodUIDMismatch,
			"shard %q: its token is bound to pod %s/%s (UID %s), which no longer exists", id.Shard, g.opts.Namespace, id.Shard, id.PodUID)
	case err != nil:
		return "", refuse(codes.Unavailable, ReasonPodLookupFailed,
			"cannot read pod %s/%s to verify shard %q's group (the coordinator needs get on pods in %s): %v", g.opts.Namespace, id.Shard, id.Shard, g.opts.Namespace, err)
	case string(pod.UID) != id.PodUID:
		return "", refuse(codes.PermissionDenied, ReasonPodUIDMismatch,
			"shard %q: its token is bound to pod UID %s, but pod %s/%s is %s (a pod created again under the name)", id.Shard, id.PodUID, g.opts.Namespace, id.Shard, pod.UID)
	}
	group := pod.Labels[GroupLabel]
	g.cache.Add(id.PodUID, group, g.opts.CacheTTL)
	return group, nil
}

// groupName spells a group for messages: the default group has no name.
func groupName(g string) string {
	if g == "" {
		return "the default group"
	}
	return `"` + g + `"`
}

// String names the verifier for logs.
func (g *PodGroups) String() string {
	return "PodGroups(namespace " + g.opts.Namespace + ", label " + GroupLabel + ")"
}
