package ownerrecord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/metadata"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// A fake's reactors never see the request's context, so a request the API server never
// answers is a client wrapper that returns only when its context ends.

// hang blocks the requests it is armed for until their context ends, and records the
// time each had left when it began.
type hang struct {
	what  string // "<verb> <resource>", as "update roles"
	armed atomic.Bool

	mu   sync.Mutex
	left []time.Duration // per hung request: its deadline minus its start (-1: none)
}

// block answers a request what: it hangs until ctx ends when armed for it.
func (h *hang) block(ctx context.Context, what string) (bool, error) {
	if !h.armed.Load() || what != h.what {
		return false, nil
	}
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	h.mu.Lock()
	h.left = append(h.left, left)
	h.mu.Unlock()
	<-ctx.Done()
	return true, ctx.Err()
}

func (h *hang) requests() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.left...)
}

type hangingKube struct {
	kubernetes.Interface
	h *hang
}

func (k hangingKube) RbacV1() rbacv1client.RbacV1Interface {
	return hangingRBAC{RbacV1Interface: k.Interface.RbacV1(), h: k.h}
}

type hangingRBAC struct {
	rbacv1client.RbacV1Interface
	h *hang
}

func (r hangingRBAC) Roles(ns string) rbacv1client.RoleInterface {
	return hangingRoles{RoleInterface: r.RbacV1Interface.Roles(ns), h: r.h}
}

func (r hangingRBAC) RoleBindings(ns string) rbacv1client.RoleBindingInterface {
	return hangingBindings{RoleBindingInterface: r.RbacV1Interface.RoleBindings(ns), h: r.h}
}

type hangingRoles struct {
	rbacv1client.RoleInterface
	h *hang
}

func (r hangingRoles) List(ctx context.Context, opts metav1.ListOptions) (*rbacv1.RoleList, error) {
	if hung, err := r.h.block(ctx, "list roles"); hung {
		return nil, err
	}
	return r.RoleInterface.List(ctx, opts)
}

func (r hangingRoles) Get(ctx context.Context, name string, opts metav1.GetOptions) (*rbacv1.Role, error) {
	if hung, err := r.h.block(ctx, "get roles"); hung {
		return nil, err
	}
	return r.RoleInterface.Get(ctx, name, opts)
}

func (r hangingRoles) Create(ctx context.Context, role *rbacv1.Role, opts metav1.CreateOptions) (*rbacv1.Role, error) {
	if hung, err := r.h.block(ctx, "create roles"); hung {
		return nil, err
	}
	return r.RoleInterface.Create(ctx, role, opts)
}

func (r hangingRoles) Update(ctx context.Context, role *rbacv1.Role, opts metav1.UpdateOptions) (*rbacv1.Role, error) {
	if hung, err := r.h.block(ctx, "update roles"); hung {
		return nil, err
	}
	return r.RoleInterface.Update(ctx, role, opts)
}

func (r hangingRoles) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if hung, err := r.h.block(ctx, "delete roles"); hung {
		return err
	}
	return r.RoleInterface.Delete(ctx, name, opts)
}

type hangingBindings struct {
	rbacv1client.RoleBindingInterface
	h *hang
}

func (r hangingBindings) List(ctx context.Context, opts metav1.ListOptions) (*rbacv1.RoleBindingList, error) {
	if hung, err := r.h.block(ctx, "list rolebindings"); hung {
		return nil, err
	}
	return r.RoleBindingInterface.List(ctx, opts)
}

func (r hangingBindings) Create(ctx context.Context, b *rbacv1.RoleBinding, opts metav1.CreateOptions) (*rbacv1.RoleBinding, error) {
	if hung, err := r.h.block(ctx, "create rolebindings"); hung {
		return nil, err
	}
	return r.RoleBindingInterface.Create(ctx, b, opts)
}

func (r hangingBindings) Update(ctx context.Context, b *rbacv1.RoleBinding, opts metav1.UpdateOptions) (*rbacv1.RoleBinding, error) {
	if hung, err := r.h.block(ctx, "update rolebindings"); hung {
		return nil, err
	}
	return r.RoleBindingInterface.Update(ctx, b, opts)
}

func (r hangingBindings) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if hung, err := r.h.block(ctx, "delete rolebindings"); hung {
		return err
	}
	return r.RoleBindingInterface.Delete(ctx, name, opts)
}

// TestLabelerRequestTimeout: a record write whose request the API server never answers
// fails after LabelerOptions.RequestTimeout, so the batch (and the Acquires waiting for
// it) is retried instead of held until the leadership ends.
func TestLabelerRequestTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	set := func(batch map[partition.ID]string) func(*fixture) error {
		return func(f *fixture) error { _, err := f.l.Set(f.ctx, batch); return err }
	}
	stamp := func(f *fixture) error { return f.l.StampTerm(f.ctx) }
	owned := []runtime.Object{ownerRoleOf("a", "3", "11", 0, 1), ownerBindingOf("a", "12")}
	tests := []struct {
		name string
		hang string
		rbac []runtime.Object
		call func(*fixture) error
	}{
		{name: "the LIST of the Roles hangs", hang: "list roles", call: set(map[partition.ID]string{0: "a"})},
		{name: "the LIST of the RoleBindings hangs", hang: "list rolebindings", call: set(map[partition.ID]string{0: "a"})},
		{name: "the update of a losing Role hangs", hang: "update roles", rbac: owned, call: set(map[partition.ID]string{1: "b"})},
		{name: "the update of a gaining Role hangs", hang: "update roles", rbac: owned, call: set(map[partition.ID]string{2: "a"})},
		{name: "the delete of an emptied Role hangs", hang: "delete roles", rbac: owned, call: set(map[partition.ID]string{0: "b", 1: "b"})},
		{name: "the create of a Role hangs", hang: "create roles", call: set(map[partition.ID]string{0: "a"})},
		{name: "the create of a RoleBinding hangs", hang: "create rolebindings", call: set(map[partition.ID]string{0: "a"})},
		{name: "the delete of a RoleBinding hangs", hang: "delete rolebindings", rbac: owned, call: set(map[partition.ID]string{0: "", 1: ""})},
		{name: "the GET of the term beacon hangs", hang: "get roles", call: stamp},
		{name: "the create of the term beacon hangs", hang: "create roles", call: stamp},
		{name: "the update of the term beacon hangs", hang: "update roles", rbac: []runtime.Object{recordRole(TermRoleName, "3", "11")}, call: stamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &hang{what: tt.hang}
			f := newFixture(t, setup{rbac: tt.rbac, opts: LabelerOptions{RequestTimeout: timeout},
				wrapKube: func(k kubernetes.Interface) kubernetes.Interface { return hangingKube{Interface: k, h: h} }})
			f.activate(7, certain)
			h.armed.Store(true)
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tt.call(f) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("= %v after %v, want the request's deadline exceeded", err, time.Since(start))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still waiting for a request the API server never answers")
			}
			reqs := h.requests()
			if len(reqs) == 0 {
				t.Fatalf("no %s request was sent", tt.hang)
			}
			for _, left := range reqs {
				if left <= 0 || left > timeout {
					t.Errorf("a hung %s request had %v left when sent, want at most the request timeout %v", tt.hang, left, timeout)
				}
			}
		})
	}
}

// hangingMeta is a metadata client whose namespace PATCH (and, with conflictFirst, the
// re-read after a conflict) is never answered: it returns only when its context ends.
type hangingMeta struct {
	metadata.Interface
	conflictFirst bool // PATCH answers 409 Conflict, and the GET that follows hangs
	armed         *atomic.Bool
}

// IsWatchListSemanticsUnSupported passes on what the fake client says: its informer
// lists, then watches.
func (hangingMeta) IsWatchListSemanticsUnSupported() bool { return true }

func (c hangingMeta) Resource(r schema.GroupVersionResource) metadata.Getter {
	return hangingResource{Getter: c.Interface.Resource(r), conflictFirst: c.conflictFirst, armed: c.armed}
}

type hangingResource struct {
	metadata.Getter
	conflictFirst bool
	armed         *atomic.Bool
}

func (r hangingResource) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if !r.armed.Load() {
		return r.Getter.Patch(ctx, name, pt, data, opts, sub...)
	}
	if r.conflictFirst {
		return nil, apierrors.NewConflict(namespacesGVR.GroupResource(), name, errors.New("the object has been modified"))
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (r hangingResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	if !r.armed.Load() || !r.conflictFirst {
		return r.Getter.Get(ctx, name, opts, sub...)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLabelerLabelRequestTimeout: a partition label write whose request the API server
// never answers fails after the request timeout, and the namespace is retried.
func TestLabelerLabelRequestTimeout(t *testing.T) {
	tests := []struct {
		name          string
		conflictFirst bool
	}{
		{name: "the PATCH hangs"},
		{name: "the re-read after a conflict hangs", conflictFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			f := newFixture(t, setup{namespaces: []runtime.Object{namespaceMeta("team-a", nil)},
				opts: LabelerOptions{RequestTimeout: 50 * time.Millisecond},
				wrapMeta: func(m metadata.Interface) metadata.Interface {
					return hangingMeta{Interface: m, conflictFirst: tc.conflictFirst, armed: &armed}
				}})
			f.activate(1, certain)
			armed.Store(true)
			done := make(chan error, 1)
			go func() { done <- f.l.writeLabel(f.ctx, "team-a") }()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("writeLabel = %v, want the request's deadline exceeded", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("writeLabel still waits for a request the API server never answers")
			}
		})
	}
}
