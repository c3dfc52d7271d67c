package shardcache

// Helpers on objects. resourceVersions are compared as integers, which KEP-5504 makes
// valid on this apiserver; one that is not an integer counts as newer than anything
// (parseRV).

import (
	"reflect"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// parseRV returns a resourceVersion as an integer. Since KEP-5504 the apiserver's
// resourceVersions are comparable decimal integers; ok is false for anything else (the
// empty string that fake clientsets put in objects, or a future opaque format), and the
// cache then falls back to treating the object as newer than anything it knows.
func parseRV(rv string) (uint64, bool) {
	if rv == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

// objectRV is parseRV of obj's resourceVersion.
func objectRV(obj any) (uint64, bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0, false
	}
	return parseRV(m.GetResourceVersion())
}

// StripManagedFields is the informers' transform: it drops metadata.managedFields, which
// controllers never read and which is often the largest part of an object. It changes
// the object in place, which a transform may do, and writes only when there is something
// to drop, so running it again on an already stripped object is a read-only no-op.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// shallowCopy returns a new top-level copy of obj (a pointer to a struct) that shares
// every map and slice with it. Listed items live in one big backing array; keeping
// pointers into it would keep every item alive, including those the filter dropped.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	if out, ok := c.Interface().(runtime.Object); ok {
		return out
	}
	return obj
}

// objectName returns obj's name, or "" if it has no object metadata.
func objectName(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetName()
}

// objectKeys returns the partition key (namespace, or own name for cluster-scoped
// objects) and name of obj; ok is false if it has no object metadata.
func objectKeys(obj any) (key, name string, ok bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", false
	}
	return partitionKey(m.GetNamespace(), m.GetName()), m.GetName(), true
}

// sortByRV orders objects by ascending resourceVersion (then name), so that injected
// objects move the reflector's resourceVersion forward monotonically within a batch.
func sortByRV(objs []runtime.Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		ri, _ := objectRV(objs[i])
		rj, _ := objectRV(objs[j])
		if ri != rj {
			return ri < rj
		}
		return objectName(objs[i]) < objectName(objs[j])
	})
}
