package ownerrecord

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// The fixture of the Labeler's tests: a metadata fake holding the Namespaces, and a
// clientset fake holding the RBAC objects of kshard's namespace, whose Role and
// RoleBinding writes behave as the API server's (apiServer): resourceVersions, and
// preconditions that fail with a Conflict.

const testNamespace = "kshard"

var testParams = PolicyParams{Namespace: testNamespace, ServiceAccount: "kshard-shard", ClusterPartition: "7"}

// paramsFor is testParams with pm's cluster partition, as the Labeler requires.
func paramsFor(pm partition.Map) PolicyParams {
	p := testParams
	p.ClusterPartition = ClusterPartitionOf(pm)
	return p
}

var (
	rolesGVR        = rbacv1.SchemeGroupVersion.WithResource("roles")
	roleBindingsGVR = rbacv1.SchemeGroupVersion.WithResource("rolebindings")
)

// tenure is a Tenure the test sets.
type tenure struct{ valid atomic.Bool }

func (t *tenure) Valid() bool { return t.valid.Load() }

func validTenure() *tenure { t := &tenure{}; t.valid.Store(true); return t }

// certain is a tenure that stays valid.
var certain = validTenure()

// setup describes a fixture.
type setup struct {
	count      int // partitions (default 8)
	namespaces []runtime.Object
	rbac       []runtime.Object
	opts       LabelerOptions
	// run runs the Labeler (its namespace workers and Role repair); otherwise only its
	// namespace informer runs, and the test calls what it tests itself.
	run bool
	// wrapKube and wrapMeta wrap the fakes the Labeler is given (hanging requests).
	wrapKube func(kubernetes.Interface) kubernetes.Interface
	wrapMeta func(metadata.Interface) metadata.Interface
}

type fixture struct {
	t    *testing.T
	pm   partition.Map
	meta *metadatafake.FakeMetadataClient
	kube *kubefake.Clientset
	api  *apiServer
	l    *Labeler
	ctx  context.Context
}

func newFixture(t *testing.T, s setup) *fixture {
	t.Helper()
	if s.count == 0 {
		s.count = 8
	}
	f := &fixture{t: t, pm: partition.Map{Count: s.count}}
	f.meta = fakeMetadata(t, s.namespaces...)
	versionedPatches(t, f.meta)
	f.kube = kubefake.NewClientset(s.rbac...)
	f.api = serveRBAC(f.kube)
	var kube kubernetes.Interface = f.kube
	if s.wrapKube != nil {
		kube = s.wrapKube(kube)
	}
	var meta metadata.Interface = f.meta
	if s.wrapMeta != nil {
		meta = s.wrapMeta(meta)
	}
	l, err := NewLabeler(meta, kube, f.pm, paramsFor(f.pm), s.opts)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	ctx, cancel := context.WithCancel(context.Background())
	f.ctx = ctx
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.run {
			if err := l.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
			return
		}
		defer l.queue.ShutDown()
		defer l.roleQueue.ShutDown()
		l.informer.RunWithContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return l.HasSynced(), nil
	}); err != nil {
		t.Fatalf("the namespace informer did not sync: %v", err)
	}
	return f
}

// activate activates the Labeler at term with tenure and returns what it claimed.
func (f *fixture) activate(term uint32, ten Tenure) Claimed {
	f.t.Helper()
	c, err := f.l.Activate(f.ctx, term, ten)
	if err != nil {
		f.t.Fatalf("Activate(%d): %v", term, err)
	}
	return c
}

// repairRoles runs one repair of the owner Roles, as the Labeler's Role worker does when
// the record changed or every RoleResync.
func (f *fixture) repairRoles() {
	f.l.roleQueue.Add(rolesKey)
	f.l.processRoles(f.ctx)
}

// fakeMetadata returns a fake metadata client holding objs.
func fakeMetadata(t *testing.T, objs ...runtime.Object) *metadatafake.FakeMetadataClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return metadatafake.NewSimpleMetadataClient(scheme, objs...)
}

func namespaceMeta(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: "1"},
	}
}

// labelsOf returns the API server's labels of namespace name.
func (f *fixture) labelsOf(name string) map[string]string {
	f.t.Helper()
	o, err := f.meta.Resource(namespacesGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return o.Labels
}

// namespacePatches returns the patches sent for namespace name (every one if name is "").
func (f *fixture) namespacePatches(name string) []clienttesting.PatchAction {
	var out []clienttesting.PatchAction
	for _, a := range f.meta.Actions() {
		if pa, ok := a.(clienttesting.PatchAction); ok && a.GetVerb() == "patch" && (name == "" || pa.GetName() == name) {
			out = append(out, pa)
		}
	}
	return out
}

// versionedPatches makes client's namespace patches behave as the API server's: a patch
// whose metadata.resourceVersion is not the stored one fails with a Conflict, and each
// patch gives the namespace the next resourceVersion (the fake keeps whatever the patch
// says).
func versionedPatches(t *testing.T, client *metadatafake.FakeMetadataClient) {
	t.Helper()
	var mu sync.Mutex
	var rv uint64 = 1
	apply := clienttesting.ObjectReaction(client.Tracker())
	client.PrependReactor("patch", "namespaces", func(action clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		pa := action.(clienttesting.PatchAction)
		var patch struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		cur, err := client.Tracker().Get(namespacesGVR, "", pa.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := cur.(metav1.Object).GetResourceVersion()
		if p := patch.Metadata.ResourceVersion; p != "" && p != stored {
			return true, nil, apierrors.NewConflict(namespacesGVR.GroupResource(), pa.GetName(),
				fmt.Errorf("resourceVersion %s, stored %s", p, stored))
		}
		_, obj, err := apply(action)
		if err != nil {
			return true, nil, err
		}
		if n, err := strconv.ParseUint(stored, 10, 64); err == nil {
			rv = max(rv, n)
		}
		rv++
		obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(rv, 10))
		return true, obj, client.Tracker().Update(namespacesGVR, obj, "")
	})
}

// apiServer makes the fake clientset's Role and RoleBinding creates, updates and deletes
// behave as the API server's: every write gives the object the next resourceVersion, a
// create carrying one is refused, an update carrying a resourceVersion that is not the
// stored one and a delete whose precondition is not fail with a Conflict. before, when
// set, sees each such request first and may answer it (inject a failure, change the
// stored object, hang).
type apiServer struct {
	kube *kubefake.Clientset

	mu     sync.Mutex
	rv     int
	before func(clienttesting.Action) (bool, runtime.Object, error)
	// violations lists requests no coordinator should send: an update without
	// resourceVersion, a delete without precondition.
	violations []string
}

func serveRBAC(kube *kubefake.Clientset) *apiServer {
	s := &apiServer{kube: kube, rv: 100}
	for _, resource := range []string{"roles", "rolebindings"} {
		kube.PrependReactor("*", resource, s.react)
	}
	return s
}

// setBefore sets the hook every Role and RoleBinding write goes through first.
func (s *apiServer) setBefore(h func(clienttesting.Action) (bool, runtime.Object, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = h
}

func (s *apiServer) nextRV() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	return strconv.Itoa(s.rv)
}

func (s *apiServer) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *apiServer) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

func (s *apiServer) react(action clienttesting.Action) (bool, runtime.Object, error) {
	switch action.GetVerb() {
	case "create", "update", "delete":
	default:
		return false, nil, nil
	}
	s.mu.Lock()
	before := s.before
	s.mu.Unlock()
	if before != nil {
		if handled, obj, err := before(action); handled {
			return true, obj, err
		}
	}
	tracker := s.kube.Tracker()
	gvr, ns := action.GetResource(), action.GetNamespace()
	gr := gvr.GroupResource()
	// By verb: an UpdateAction is a CreateAction too (both only add GetObject).
	switch action.GetVerb() {
	case "create":
		obj := action.(clienttesting.CreateAction).GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		if m.GetResourceVersion() != "" {
			return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
		}
		m.SetResourceVersion(s.nextRV())
		if err := tracker.Create(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	case "update":
		obj := action.(clienttesting.UpdateAction).GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		cur, err := tracker.Get(gvr, ns, m.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := cur.(metav1.Object).GetResourceVersion()
		switch rv := m.GetResourceVersion(); {
		case rv == "":
			s.violation("update of %s %s without resourceVersion", gr, m.GetName())
		case rv != stored:
			return true, nil, apierrors.NewConflict(gr, m.GetName(), fmt.Errorf("resourceVersion %s, stored %s", rv, stored))
		}
		m.SetResourceVersion(s.nextRV())
		if err := tracker.Update(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	case "delete":
		a := action.(clienttesting.DeleteAction)
		cur, err := tracker.Get(gvr, ns, a.GetName())
		if err != nil {
			return true, nil, err
		}
		stored := cur.(metav1.Object).GetResourceVersion()
		pre := a.GetDeleteOptions().Preconditions
		switch {
		case pre == nil || pre.ResourceVersion == nil:
			s.violation("delete of %s %s without resourceVersion precondition", gr, a.GetName())
		case *pre.ResourceVersion != stored:
			return true, nil, apierrors.NewConflict(gr, a.GetName(), fmt.Errorf("precondition resourceVersion %s, stored %s", *pre.ResourceVersion, stored))
		}
		return true, nil, tracker.Delete(gvr, ns, a.GetName())
	}
	return false, nil, nil
}

// rbacWrite is one Role or RoleBinding write the Labeler sent, in order.
type rbacWrite struct {
	verb, resource, name string
	// role is the Role a create or update sent (nil for a delete or a RoleBinding).
	role *rbacv1.Role
	// rv is the resourceVersion an update carried, or a delete's precondition.
	rv string
}

func (w rbacWrite) String() string {
	s := w.verb + " " + w.resource + " " + w.name
	if w.role != nil {
		s += fmt.Sprintf(" %v", testPartitionsOf(w.role))
	}
	return s
}

// rbacWrites returns the Role and RoleBinding writes sent to the fake, in order.
func (f *fixture) rbacWrites() []rbacWrite {
	var out []rbacWrite
	for _, a := range f.kube.Actions() {
		resource := a.GetResource().Resource
		if resource != "roles" && resource != "rolebindings" {
			continue
		}
		w := rbacWrite{verb: a.GetVerb(), resource: resource}
		switch a.GetVerb() {
		case "create", "update":
			obj := a.(clienttesting.CreateAction).GetObject()
			m, _ := meta.Accessor(obj)
			w.name, w.rv = m.GetName(), m.GetResourceVersion()
			if r, ok := obj.(*rbacv1.Role); ok {
				w.role = r.DeepCopy()
			}
		case "delete":
			a := a.(clienttesting.DeleteAction)
			w.name = a.GetName()
			if pre := a.GetDeleteOptions().Preconditions; pre != nil && pre.ResourceVersion != nil {
				w.rv = *pre.ResourceVersion
			}
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

// resetActions forgets the actions recorded so far.
func (f *fixture) resetActions() {
	f.kube.ClearActions()
	f.meta.ClearActions()
}

// roles returns the owner Roles stored, shard → partitions granted (by the test's own
// reading of the rules).
func (f *fixture) roles() map[string][]int {
	f.t.Helper()
	out := map[string][]int{}
	list, err := f.kube.Tracker().List(rolesGVR, rbacv1.SchemeGroupVersion.WithKind("Role"), testNamespace)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range list.(*rbacv1.RoleList).Items {
		if s, ok := strings.CutPrefix(r.Name, OwnerRolePrefix); ok {
			out[s] = testPartitionsOf(&r)
		}
	}
	return out
}

// role returns the stored Role name (nil when none).
func (f *fixture) role(name string) *rbacv1.Role {
	f.t.Helper()
	o, err := f.kube.Tracker().Get(rolesGVR, testNamespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return o.(*rbacv1.Role)
}

// bindings returns the stored RoleBindings by name.
func (f *fixture) bindings() map[string]*rbacv1.RoleBinding {
	f.t.Helper()
	list, err := f.kube.Tracker().List(roleBindingsGVR, rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), testNamespace)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*rbacv1.RoleBinding{}
	for i, b := range list.(*rbacv1.RoleBindingList).Items {
		out[b.Name] = &list.(*rbacv1.RoleBindingList).Items[i]
	}
	return out
}

// testPartitionsOf returns the partition IDs every rule of r names, sorted, read
// independently of the product's partitionsOf (any resourceName that is a number).
func testPartitionsOf(r *rbacv1.Role) []int {
	var out []int
	for _, rule := range r.Rules {
		for _, n := range rule.ResourceNames {
			if v, err := strconv.Atoi(n); err == nil {
				out = append(out, v)
			}
		}
	}
	sort.Ints(out)
	return slices.Compact(out)
}

// Builders of the RBAC objects a test seeds.

func ownerRule(names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{PartitionsGroup}, Resources: []string{PartitionsResource},
		Verbs: []string{OwnVerb}, ResourceNames: names}
}

// recordRole is a Role of the record (labelled), of term ("" for no annotation).
func recordRole(name, term, rv string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, ResourceVersion: rv,
		Labels: map[string]string{RecordLabel: "true"}}, Rules: rules}
	if term != "" {
		r.Annotations = map[string]string{TermAnnotation: term}
	}
	return r
}

// ownerRoleOf is shard's owner Role granting ps at term.
func ownerRoleOf(shard, term, rv string, ps ...int) *rbacv1.Role {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = strconv.Itoa(p)
	}
	return recordRole(OwnerRolePrefix+shard, term, rv, ownerRule(names...))
}

func ownerBindingOf(shard, rv string) *rbacv1.RoleBinding {
	name := OwnerRolePrefix + shard
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, ResourceVersion: rv, Labels: map[string]string{RecordLabel: "true"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: testNamespace}},
	}
}

// namespacesOf returns n namespace names of partition p of pm.
func namespacesOf(pm partition.Map, p partition.ID, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if name := fmt.Sprintf("ns-%d", i); pm.For(name) == p {
			out = append(out, name)
		}
	}
	return out
}
