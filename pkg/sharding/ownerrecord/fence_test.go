package ownerrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// authorizer answers LocalSubjectAccessReviews from the RBAC objects the fake holds, as
// the API server's RBAC authorizer would (Roles bound in the review's namespace to a
// ServiceAccount or a group of the review), the first lag reviews from a view that has
// not seen the Labeler's writes yet (denied).
type authorizer struct {
	f   *fixture
	lag atomic.Int32

	mu      sync.Mutex
	reviews []authorizationv1.LocalSubjectAccessReview
	firstAt int // index of the first review among the fake's actions
}

func serveReviews(f *fixture, lag int) *authorizer {
	a := &authorizer{f: f, firstAt: -1}
	a.lag.Store(int32(lag))
	f.kube.PrependReactor("create", "localsubjectaccessreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		review := action.(clienttesting.CreateAction).GetObject().(*authorizationv1.LocalSubjectAccessReview).DeepCopy()
		a.mu.Lock()
		a.reviews = append(a.reviews, *review)
		a.mu.Unlock()
		if a.lag.Add(-1) >= 0 {
			return true, review, nil
		}
		review.Status.Allowed = a.allows(review.Namespace, review.Spec)
		return true, review, nil
	})
	return a
}

// allows reports whether the Roles bound in namespace to the review's user or groups
// allow its resource attributes.
func (a *authorizer) allows(namespace string, spec authorizationv1.SubjectAccessReviewSpec) bool {
	ra := spec.ResourceAttributes
	if ra == nil || ra.Namespace != namespace {
		return false
	}
	bindings, err := a.f.kube.Tracker().List(roleBindingsGVR, rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), namespace)
	if err != nil {
		return false
	}
	for _, b := range bindings.(*rbacv1.RoleBindingList).Items {
		if b.RoleRef.Kind != "Role" || !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			switch s.Kind {
			case rbacv1.ServiceAccountKind:
				return ServiceAccountUser(s.Namespace, s.Name) == spec.User
			case rbacv1.GroupKind:
				return slices.Contains(spec.Groups, s.Name)
			}
			return false
		}) {
			continue
		}
		o, err := a.f.kube.Tracker().Get(rolesGVR, namespace, b.RoleRef.Name)
		if err != nil {
			continue
		}
		if rbacAllows(o.(*rbacv1.Role).Rules, ra.Group, ra.Resource, ra.Verb, ra.Name) {
			return true
		}
	}
	return false
}

func (a *authorizer) Reviews() []authorizationv1.LocalSubjectAccessReview {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.reviews)
}

// probeServer answers the fence probe's dry-run Event creates as the API server with the
// fence policy would: allowed when the impersonated shard's owner subject is allowed its
// namespace's partition (the authorizer), refused by the policy otherwise. With
// notEnforced, everything is allowed (the policy is not installed); the first lag probes
// of a new owner are refused (the API server's informers have not seen the Role yet).
type probeServer struct {
	*httptest.Server
	t           *testing.T
	f           *fixture
	auth        *authorizer
	notEnforced atomic.Bool
	lag         atomic.Int32

	mu     sync.Mutex
	probes []string // "<shard> <namespace> allowed|refused"
}

func serveProbes(t *testing.T, f *fixture, auth *authorizer) *probeServer {
	s := &probeServer{t: t, f: f, auth: auth}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *probeServer) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // api v1 namespaces <ns> events
	if r.Method != http.MethodPost || len(parts) != 5 || parts[0] != "api" || parts[2] != "namespaces" || parts[4] != "events" {
		s.t.Errorf("the probe sent %s %s, want a create of an Event", r.Method, r.URL.Path)
		http.Error(w, "unexpected", http.StatusBadRequest)
		return
	}
	if r.URL.Query().Get("dryRun") != metav1.DryRunAll {
		s.t.Errorf("the probe sent a create of an Event that is not a dry run: %s", r.URL)
	}
	ns := parts[3]
	if got, want := r.Header.Get("Impersonate-User"), testParams.ProbeUser(); got != want {
		s.t.Errorf("the probe impersonates %q, want the probe user %q", got, want)
	}
	var shard string
	for k, v := range r.Header {
		if strings.HasPrefix(k, "Impersonate-Extra-") && len(v) > 0 {
			shard = v[0]
		}
	}
	allowed := s.notEnforced.Load()
	if !allowed && (shard == SentinelShard || s.lag.Add(-1) < 0) {
		o, err := s.f.meta.Tracker().Get(namespacesGVR, "", ns)
		if err == nil {
			label := o.(metav1.Object).GetLabels()[DefaultPartitionLabel]
			allowed = label != "" && s.auth.allows(testNamespace, authorizationv1.SubjectAccessReviewSpec{
				User: ServiceAccountUser(testNamespace, OwnerRoleName(shard)),
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: testNamespace, Group: PartitionsGroup,
					Resource: PartitionsResource, Verb: OwnVerb, Name: label},
			})
		}
	}
	verdict := "refused"
	if allowed {
		verdict = "allowed"
	}
	s.mu.Lock()
	s.probes = append(s.probes, shard+" "+ns+" "+verdict)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if allowed {
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Event", "apiVersion": "v1",
			"metadata": map[string]any{"name": "kshard-fence-probe-x", "namespace": ns}})
		return
	}
	w.WriteHeader(http.StatusForbidden)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
		"message": fmt.Sprintf("events is forbidden: ValidatingAdmissionPolicy '%s' with binding '%[1]s' denied request: %s shard %s may not ...",
			DefaultPolicyName, MessagePrefix, shard)})
}

func (s *probeServer) Probes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.probes)
}

// TestFenceApply: Apply writes the batch (Set), then, for each new owner, waits until an
// access review shows its owner subject allowed one of its new partitions and the
// sentinel's refused, then sends one round of dry-run probes (the new owner allowed, the
// sentinel refused) in a labelled namespace of its partitions. A batch that grants
// nothing waits for nothing; a wait that never ends fails the batch.
func TestFenceApply(t *testing.T) {
	pm := partition.Map{Count: 8}
	ns1 := namespacesOf(pm, 1, 2)
	owned := []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")}
	everyone := []runtime.Object{
		// A binding granting every ServiceAccount every partition: the sentinel too.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "everyone", Namespace: testNamespace},
			Rules: []rbacv1.PolicyRule{ownerRule()}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "everyone", Namespace: testNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everyone"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts"}}},
	}
	tests := []struct {
		name        string
		rbac        []runtime.Object
		namespaces  []runtime.Object
		batch       map[partition.ID]string
		lag         int
		probeLag    int
		notEnforced bool
		invalid     bool
		wantErr     string
		wantErrIs   error
		want        Applied // Writes, Reviews, Probes, ProbeNamespace
		wantProbes  []string
	}{
		{
			name: "a move is enforced", rbac: owned, batch: map[partition.ID]string{1: "b"},
			namespaces: []runtime.Object{namespaceMeta(ns1[0], nil), namespaceMeta(ns1[1], map[string]string{DefaultPartitionLabel: "1"})},
			want:       Applied{Writes: 3, Reviews: 2, Probes: 1, ProbeNamespace: ns1[1]},
			wantProbes: []string{"b " + ns1[1] + " allowed", SentinelShard + " " + ns1[1] + " refused"},
		},
		{
			name: "the authorizer lags", rbac: owned, batch: map[partition.ID]string{1: "b"}, lag: 3,
			namespaces: []runtime.Object{namespaceMeta(ns1[1], map[string]string{DefaultPartitionLabel: "1"})},
			want:       Applied{Writes: 3, Reviews: 5, Probes: 1, ProbeNamespace: ns1[1]},
			wantProbes: []string{"b " + ns1[1] + " allowed", SentinelShard + " " + ns1[1] + " refused"},
		},
		{
			name: "admission lags", rbac: owned, batch: map[partition.ID]string{1: "b"}, probeLag: 2,
			namespaces: []runtime.Object{namespaceMeta(ns1[1], map[string]string{DefaultPartitionLabel: "1"})},
			want:       Applied{Writes: 3, Reviews: 2, Probes: 3, ProbeNamespace: ns1[1]},
			wantProbes: []string{"b " + ns1[1] + " refused", "b " + ns1[1] + " refused", "b " + ns1[1] + " allowed", SentinelShard + " " + ns1[1] + " refused"},
		},
		{
			name: "no labelled namespace: no probe", rbac: owned, batch: map[partition.ID]string{1: "b"},
			namespaces: []runtime.Object{namespaceMeta(ns1[0], nil)},
			want:       Applied{Writes: 3, Reviews: 2},
		},
		{
			name: "two new owners", rbac: owned, batch: map[partition.ID]string{0: "c", 1: "b"},
			want: Applied{Writes: 6, Reviews: 4}, // a deleted, b and c created, with bindings; a's binding deleted
		},
		{
			name: "a batch that grants nothing waits for nothing", rbac: owned, batch: map[partition.ID]string{1: ""},
			namespaces: []runtime.Object{namespaceMeta(ns1[1], map[string]string{DefaultPartitionLabel: "1"})},
			want:       Applied{Writes: 1},
		},
		{
			name: "the sentinel is allowed too", rbac: append(slices.Clone(owned), everyone...), batch: map[partition.ID]string{1: "b"},
			wantErr: "lets " + ServiceAccountUser(testNamespace, OwnerRoleName(SentinelShard)) + " own partition 1 too",
			want:    Applied{Writes: 3},
		},
		{
			name: "the policy is not in force", rbac: owned, batch: map[partition.ID]string{1: "b"}, notEnforced: true,
			namespaces: []runtime.Object{namespaceMeta(ns1[1], map[string]string{DefaultPartitionLabel: "1"})},
			wantErr:    "not enforced (is the policy installed?)",
			want:       Applied{Writes: 3, Reviews: 2, ProbeNamespace: ns1[1]},
		},
		{
			name: "not written: no wait", rbac: owned, batch: map[partition.ID]string{1: "b"}, invalid: true,
			wantErrIs: ErrNotCertain,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{count: pm.Count, rbac: tt.rbac, namespaces: tt.namespaces})
			auth := serveReviews(f, tt.lag)
			probes := serveProbes(t, f, auth)
			probes.notEnforced.Store(tt.notEnforced)
			probes.lag.Store(int32(tt.probeLag))
			fence, err := NewFence(f.l, FenceOptions{Params: testParams, Base: &rest.Config{Host: probes.URL}, ProbeTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ten := validTenure()
			ten.valid.Store(!tt.invalid)
			f.activate(7, ten)
			f.resetActions()
			a, err := fence.Apply(f.ctx, tt.batch)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Apply = %v, want an error with %q", err, tt.wantErr)
				}
			case tt.wantErrIs != nil:
				if !errors.Is(err, tt.wantErrIs) {
					t.Errorf("Apply = %v, want %v", err, tt.wantErrIs)
				}
			case err != nil:
				t.Fatalf("Apply: %v", err)
			}
			if a.Writes != tt.want.Writes || a.ProbeNamespace != tt.want.ProbeNamespace ||
				(tt.wantErr == "" && (a.Reviews != tt.want.Reviews || a.Probes != tt.want.Probes)) {
				t.Errorf("Applied %+v, want %+v", a, tt.want)
			}
			if tt.wantProbes != nil && !slices.Equal(probes.Probes(), tt.wantProbes) {
				t.Errorf("probes %v, want %v", probes.Probes(), tt.wantProbes)
			}
			// Every review after every write, and asking what the fence policy asks.
			lastWrite, firstReview := -1, -1
			for i, act := range f.kube.Actions() {
				switch act.GetResource().Resource {
				case "roles", "rolebindings":
					if act.GetVerb() != "list" && act.GetVerb() != "get" {
						lastWrite = i
					}
				case "localsubjectaccessreviews":
					if firstReview < 0 {
						firstReview = i
					}
				}
			}
			if firstReview >= 0 && firstReview < lastWrite {
				t.Errorf("a review (action %d) was sent before the last record write (action %d)", firstReview, lastWrite)
			}
			reviews := auth.Reviews()
			if len(reviews) != a.Reviews && tt.wantErr == "" {
				t.Errorf("%d reviews sent, Applied says %d", len(reviews), a.Reviews)
			}
			for _, r := range reviews {
				ra := r.Spec.ResourceAttributes
				shard := strings.TrimPrefix(strings.TrimPrefix(r.Spec.User, "system:serviceaccount:"+testNamespace+":"), OwnerRolePrefix)
				p, _ := strconv.Atoi(ra.Name)
				if r.Namespace != testNamespace || ra == nil || ra.Namespace != testNamespace || ra.Group != PartitionsGroup ||
					ra.Resource != PartitionsResource || ra.Verb != OwnVerb ||
					(shard != SentinelShard && tt.batch[partition.ID(p)] != shard) ||
					!slices.Contains(r.Spec.Groups, "system:serviceaccounts") {
					t.Errorf("review %+v (attributes %+v) does not ask whether a new owner, or the sentinel, owns one of its partitions", r.Spec, ra)
				}
			}
		})
	}
}

// TestFenceClaim: Claim activates the Labeler and stamps its term on the term beacon;
// with a plausible term above its own on the record it leaves the record unclaimed and
// stamps nothing; when the stamp fails, it releases the record.
func TestFenceClaim(t *testing.T) {
	tests := []struct {
		name       string
		rbac       []runtime.Object
		failStamp  bool
		wantErr    bool
		wantActive bool
		wantBeacon string
	}{
		{name: "claimed and stamped", rbac: []runtime.Object{ownerRoleOf("a", "3", "11", 0)}, wantActive: true, wantBeacon: "7"},
		{name: "a term above", rbac: []runtime.Object{ownerRoleOf("a", "9", "11", 0)}},
		{name: "the stamp fails", failStamp: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, setup{rbac: tt.rbac})
			fence, err := NewFence(f.l, FenceOptions{Params: testParams, Base: &rest.Config{Host: "https://127.0.0.1:1"}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.failStamp {
				f.api.setBefore(func(a clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(rolesGVR.GroupResource(), TermRoleName, errors.New("no"))
				})
			}
			_, err = fence.Claim(f.ctx, 7, certain)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Claim = %v, wantErr %t", err, tt.wantErr)
			}
			if active, _, _, _ := f.l.snapshot(); active != tt.wantActive {
				t.Errorf("active = %t after Claim, want %t", active, tt.wantActive)
			}
			r := f.role(TermRoleName)
			switch {
			case tt.wantBeacon == "" && r != nil:
				t.Errorf("the beacon was written: %+v", r)
			case tt.wantBeacon != "" && (r == nil || r.Annotations[TermAnnotation] != tt.wantBeacon):
				t.Errorf("the beacon is %+v, want term %s", r, tt.wantBeacon)
			}
			fence.Release()
			if active, _, _, _ := f.l.snapshot(); active {
				t.Error("still active after Release")
			}
		})
	}
}
