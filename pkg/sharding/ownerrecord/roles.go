package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// The Role half of the record: one owner Role and RoleBinding per shard that owns a
// partition, in kshard's namespace (record.go). The Labeler reads them from the API
// server before it writes (a list of a few small objects, not a cache that may lag its
// own last writes) and writes the difference with its table, removals first.

// roleSet is the record's RBAC objects as listed.
type roleSet struct {
	roles    map[string]*rbacv1.Role // owner Roles and the term beacon, by name
	bindings map[string]*rbacv1.RoleBinding
}

// listRoles lists the record's Roles and RoleBindings in kshard's namespace: those named
// like record objects, whether or not they carry RecordLabel (RBAC grants by name, not by
// label; one created without the label must not hide from the Labeler).
func (l *Labeler) listRoles(ctx context.Context) (roleSet, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	var opts metav1.ListOptions
	rbac := l.kube.RbacV1()
	roles, err := rbac.Roles(l.params.Namespace).List(ctx, opts)
	if err != nil {
		return roleSet{}, fmt.Errorf("listing the owner Roles in namespace %s: %w", l.params.Namespace, err)
	}
	bindings, err := rbac.RoleBindings(l.params.Namespace).List(ctx, opts)
	if err != nil {
		return roleSet{}, fmt.Errorf("listing the owner RoleBindings in namespace %s: %w", l.params.Namespace, err)
	}
	rs := roleSet{roles: map[string]*rbacv1.Role{}, bindings: map[string]*rbacv1.RoleBinding{}}
	for i := range roles.Items {
		if isRecordName(roles.Items[i].Name) {
			rs.roles[roles.Items[i].Name] = &roles.Items[i]
		}
	}
	for i := range bindings.Items {
		if _, ok := shardOf(bindings.Items[i].Name); ok {
			rs.bindings[bindings.Items[i].Name] = &bindings.Items[i]
		}
	}
	return rs, nil
}

// rolesKey is roleQueue's only key: a repair of every owner Role.
const rolesKey = "owner-roles"

func (l *Labeler) runRoleWorker(ctx context.Context) {
	for l.processRoles(ctx) {
	}
}

// processRoles repairs the owner Roles from the table while the Labeler is active: a
// change somebody else made (a stale replica's late write, an administrator's), or a
// batch Set could not finish.
func (l *Labeler) processRoles(ctx context.Context) bool {
	key, shutdown := l.roleQueue.Get()
	if shutdown {
		return false
	}
	defer l.roleQueue.Done(key)
	if active, _, _, _ := l.snapshot(); !active {
		l.roleQueue.Forget(key)
		return true
	}
	l.roleMu.Lock()
	n, err := l.writeRolesLocked(ctx)
	l.roleMu.Unlock()
	if err != nil {
		klog.FromContext(ctx).Info("repairing the owner Roles failed; retrying", "err", err.Error())
		l.roleQueue.AddRateLimited(key)
		return true
	}
	if n > 0 {
		klog.FromContext(ctx).Info("repaired owner Roles that differed from the owner table", "writes", n)
	}
	l.roleQueue.Forget(key)
	return true
}

// roleWriter writes one pass of owner Roles at one term and tenure.
type roleWriter struct {
	l      *Labeler
	term   uint32
	tenure Tenure
	rs     roleSet
	writes int
}

// writeRoles makes the owner Roles and RoleBindings grant what the table says: first it
// takes from every Role what it must lose (deleting a Role left empty), then it gives
// every shard its partitions and a RoleBinding, then it deletes the RoleBindings of
// shards that own nothing. It returns the number of writes. l.roleMu must be held.
func (l *Labeler) writeRolesLocked(ctx context.Context) (int, error) {
	active, term, tenure, owners := l.snapshot()
	if !active {
		return 0, errors.New("owner labeler: not active (not the leader)")
	}
	rs, err := l.listRoles(ctx)
	if err != nil {
		return 0, err
	}
	w := &roleWriter{l: l, term: term, tenure: tenure, rs: rs}
	desired := map[string][]partition.ID{}
	for p, s := range owners {
		desired[s] = append(desired[s], p)
	}
	current := map[string][]partition.ID{}
	for name, r := range rs.roles {
		if s, ok := shardOf(name); ok {
			current[s] = partitionsOf(r, l.pm)
		}
	}
	// Every shard the table, an owner Role or an owner RoleBinding names: a binding whose
	// Role is gone (its delete failed after the Role's) is deleted too.
	seen := map[string]bool{}
	var shards []string
	for s, ps := range desired {
		slices.Sort(ps)
		seen[s] = true
		shards = append(shards, s)
	}
	for s := range current {
		if !seen[s] {
			seen[s] = true
			shards = append(shards, s)
		}
	}
	for name := range rs.bindings {
		if s, ok := shardOf(name); ok && !seen[s] {
			seen[s] = true
			shards = append(shards, s)
		}
	}
	sort.Strings(shards)

	var errs []error
	for _, s := range shards { // removals
		keep := intersect(current[s], desired[s])
		if len(keep) == len(current[s]) && w.ownerRoleExact(s) {
			continue
		}
		if len(keep) == 0 {
			errs = append(errs, w.deleteRole(ctx, s))
		} else {
			errs = append(errs, w.putRole(ctx, s, keep))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return w.writes, err // no grant before every removal is written
	}
	for _, s := range shards { // grants
		if len(desired[s]) == 0 {
			continue
		}
		if r, ok := w.rs.roles[OwnerRoleName(s)]; !ok || !slices.Equal(partitionsOf(r, l.pm), desired[s]) || !w.ownerRoleExact(s) {
			if err := w.putRole(ctx, s, desired[s]); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		errs = append(errs, w.ensureBinding(ctx, s))
	}
	for _, s := range shards { // bindings of shards that own nothing
		if _, ok := w.rs.bindings[OwnerRoleName(s)]; ok && len(desired[s]) == 0 {
			errs = append(errs, w.deleteBinding(ctx, s))
		}
	}
	return w.writes, errors.Join(errs...)
}

// ownerRoleExact reports whether shard's Role, as listed, is exactly what ownerRole
// builds for the partitions it grants: one owner rule, nothing else.
func (w *roleWriter) ownerRoleExact(shard string) bool {
	r, ok := w.rs.roles[OwnerRoleName(shard)]
	if !ok {
		return true // nothing to fix
	}
	return len(r.Rules) == 1 && isOwnerRule(r.Rules[0]) && len(partitionsOf(r, w.l.pm)) == len(r.Rules[0].ResourceNames)
}

// check returns ErrNotCertain unless the tenure is valid, and logs a write over a term
// above the writer's.
func (w *roleWriter) check(ctx context.Context, what string, m metav1.Object) error {
	if !w.tenure.Valid() {
		return fmt.Errorf("%s: %w", what, ErrNotCertain)
	}
	if m != nil {
		if t := termOf(m); t > w.term {
			// Not a live leader's while the tenure is valid (see Labeler): written over.
			klog.FromContext(ctx).V(2).Info("writing over an owner record of a term above this leader's", "object", what, "recordTerm", t, "term", w.term)
		}
	}
	return nil
}

// putRole creates or updates shard's owner Role to grant partitions (not empty), with
// the listed copy's resourceVersion as precondition.
func (w *roleWriter) putRole(ctx context.Context, shard string, partitions []partition.ID) error {
	want := w.l.params.ownerRole(shard, partitions, w.term)
	roles := w.l.kube.RbacV1().Roles(w.l.params.Namespace)
	got, exists := w.rs.roles[want.Name]
	what := "Role " + w.l.params.Namespace + "/" + want.Name
	var prev metav1.Object
	if exists {
		prev = got
	}
	if err := w.check(ctx, what, prev); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, w.l.opts.RequestTimeout)
	defer cancel()
	var out *rbacv1.Role
	var err error
	if exists {
		upd := got.DeepCopy()
		upd.Labels, upd.Annotations = mergeMap(upd.Labels, want.Labels), mergeMap(upd.Annotations, want.Annotations)
		upd.Rules = want.Rules
		out, err = roles.Update(rctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
	} else {
		out, err = roles.Create(rctx, want, metav1.CreateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return fmt.Errorf("writing %s (%d partitions): %w", what, len(partitions), err)
	}
	w.writes++
	w.rs.roles[out.Name] = out
	return nil
}

// deleteRole deletes shard's owner Role, with the listed copy's resourceVersion as
// precondition.
func (w *roleWriter) deleteRole(ctx context.Context, shard string) error {
	name := OwnerRoleName(shard)
	got, ok := w.rs.roles[name]
	if !ok {
		return nil
	}
	if err := w.deleteListed(ctx, "Role", name, got, w.l.kube.RbacV1().Roles(w.l.params.Namespace).Delete); err != nil {
		return err
	}
	delete(w.rs.roles, name)
	return nil
}

// deleteListed deletes the listed object got of kind and name with del, its
// resourceVersion as precondition, only while the tenure is valid. An object already
// gone is no error.
func (w *roleWriter) deleteListed(ctx context.Context, kind, name string, got metav1.Object,
	del func(context.Context, string, metav1.DeleteOptions) error) error {
	what := kind + " " + w.l.params.Namespace + "/" + name
	if err := w.check(ctx, what, got); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, w.l.opts.RequestTimeout)
	defer cancel()
	rv := got.GetResourceVersion()
	if err := del(rctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", what, err)
	}
	w.writes++
	return nil
}

// ensureBinding creates shard's RoleBinding, or puts back its subjects (recreating it
// when its roleRef, which cannot change, is not the owner Role).
func (w *roleWriter) ensureBinding(ctx context.Context, shard string) error {
	want := w.l.params.ownerRoleBinding(shard)
	got, ok := w.rs.bindings[want.Name]
	if ok && got.RoleRef == want.RoleRef && equality.Semantic.DeepEqual(got.Subjects, want.Subjects) {
		return nil
	}
	what := "RoleBinding " + w.l.params.Namespace + "/" + want.Name
	if err := w.check(ctx, what, nil); err != nil {
		return err
	}
	bindings := w.l.kube.RbacV1().RoleBindings(w.l.params.Namespace)
	rctx, cancel := context.WithTimeout(ctx, w.l.opts.RequestTimeout)
	defer cancel()
	var out *rbacv1.RoleBinding
	var err error
	switch {
	case ok && got.RoleRef == want.RoleRef:
		upd := got.DeepCopy()
		upd.Subjects = want.Subjects
		out, err = bindings.Update(rctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
	case ok:
		if err = w.deleteBinding(ctx, shard); err == nil {
			out, err = bindings.Create(rctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		}
	default:
		out, err = bindings.Create(rctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: created by someone else since the list: %w", what, err)
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	w.writes++
	w.rs.bindings[out.Name] = out
	return nil
}

// deleteBinding deletes shard's RoleBinding, with the listed copy's resourceVersion as
// precondition.
func (w *roleWriter) deleteBinding(ctx context.Context, shard string) error {
	name := OwnerRoleName(shard)
	got, ok := w.rs.bindings[name]
	if !ok {
		return nil
	}
	if err := w.deleteListed(ctx, "RoleBinding", name, got, w.l.kube.RbacV1().RoleBindings(w.l.params.Namespace).Delete); err != nil {
		return err
	}
	delete(w.rs.bindings, name)
	return nil
}

// StampTerm writes the active term on the term beacon (TermRoleName) unless it carries
// that term or a higher one. The term Lease can be deleted while the shards run, and a
// leadership that moves nothing writes no owner Role: without a stamp a later leader
// could take this very term again while shards hold its epochs. A leader stamps it before
// it serves.
func (l *Labeler) StampTerm(ctx context.Context) error {
	active, term, tenure, _ := l.snapshot()
	if !active {
		return errors.New("owner labeler: not active (not the leader)")
	}
	roles := l.kube.RbacV1().Roles(l.params.Namespace)
	what := "Role " + l.params.Namespace + "/" + TermRoleName
	rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	got, err := roles.Get(rctx, TermRoleName, metav1.GetOptions{})
	stamp := map[string]string{TermAnnotation: strconv.FormatUint(uint64(term), 10)}
	switch {
	case apierrors.IsNotFound(err):
		if !tenure.Valid() {
			return fmt.Errorf("%s: %w", what, ErrNotCertain)
		}
		// Rules empty, not null: the record guard's CEL iterates them.
		_, err = roles.Create(rctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{
			Name: TermRoleName, Namespace: l.params.Namespace, Labels: map[string]string{RecordLabel: "true"}, Annotations: stamp,
		}, Rules: []rbacv1.PolicyRule{}}, metav1.CreateOptions{FieldManager: FieldManager})
	case err != nil:
	case termOf(got) >= term && leader.PlausibleTerm(uint64(termOf(got)), time.Now()):
		return nil // a forged term is written over, like any record of one
	case !tenure.Valid():
		return fmt.Errorf("%s: %w", what, ErrNotCertain)
	default:
		upd := got.DeepCopy()
		upd.Annotations = mergeMap(upd.Annotations, stamp)
		upd.Labels = mergeMap(upd.Labels, map[string]string{RecordLabel: "true"})
		upd.Rules = []rbacv1.PolicyRule{}
		_, err = roles.Update(rctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return fmt.Errorf("stamping term %d on %s: %w", term, what, err)
	}
	return nil
}

// intersect returns the elements of a (sorted) that are in b (sorted).
func intersect(a, b []partition.ID) []partition.ID {
	var out []partition.ID
	for _, p := range a {
		if _, ok := slices.BinarySearch(b, p); ok {
			out = append(out, p)
		}
	}
	return out
}

// mergeMap returns m with every entry of add set.
func mergeMap(m, add map[string]string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	for k, v := range add {
		m[k] = v
	}
	return m
}
