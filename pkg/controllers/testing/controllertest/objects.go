package controllertest

import (
	"fmt"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
)

// GenerateNames makes client do for creates of resource what the API server does and the
// fake clientset does not: an object created with generateName gets a name (generateName
// and a five-digit sequence number, from 1) and a UID ("uid-" and the name).
func GenerateNames(client *fake.Clientset, resource string) {
	var created atomic.Int32
	client.PrependReactor("create", resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		o, err := meta.Accessor(a.(clienttesting.CreateAction).GetObject())
		if err != nil {
			return true, nil, err
		}
		if o.GetName() == "" {
			o.SetName(fmt.Sprintf("%s%05d", o.GetGenerateName(), created.Add(1)))
			o.SetUID(types.UID("uid-" + o.GetName()))
		}
		return false, nil, nil
	})
}

// Objects returns objs as runtime.Objects, as NewFixture and Cache take them.
func Objects[T runtime.Object](objs ...T) []runtime.Object {
	out := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, o)
	}
	return out
}

// Stored returns the objects of T's kind in namespace that client's fake API server holds,
// sorted by name.
func Stored[T runtime.Object](t testing.TB, client *fake.Clientset, namespace string) []T {
	t.Helper()
	gvk := kindOf[T](t)
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	l, err := client.Tracker().List(gvr, gvk, namespace)
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]T, 0, len(items))
	for _, o := range items {
		out = append(out, o.(T))
	}
	sort.Slice(out, func(i, j int) bool { return name(out[i]) < name(out[j]) })
	return out
}

// Get returns the object of T's kind named namespace/name that client's fake API server
// holds, failing the test if there is none.
func Get[T runtime.Object](t testing.TB, client *fake.Clientset, namespace, name string) T {
	t.Helper()
	gvr, _ := meta.UnsafeGuessKindToResource(kindOf[T](t))
	o, err := client.Tracker().Get(gvr, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(T)
}

// Created returns the objects of T's kind that client was asked to create, in order
// (whether or not the create succeeded).
func Created[T runtime.Object](client *fake.Clientset) []T { return sent[T](client, "create", "") }

// StatusUpdates returns the objects of T's kind whose status client was asked to update,
// in order.
func StatusUpdates[T runtime.Object](client *fake.Clientset) []T {
	return sent[T](client, "update", "status")
}

// sent returns the objects of T's kind sent with verb on subresource ("" for none).
func sent[T runtime.Object](client *fake.Clientset, verb, subresource string) []T {
	var out []T
	for _, a := range client.Actions() {
		w, ok := a.(interface{ GetObject() runtime.Object })
		if !ok || a.GetVerb() != verb || a.GetSubresource() != subresource {
			continue
		}
		if o, ok := w.GetObject().(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// kindOf returns the group/version/kind of T, a pointer to an API type of client-go's
// scheme.
func kindOf[T runtime.Object](t testing.TB) schema.GroupVersionKind {
	t.Helper()
	var zero T
	obj := reflect.New(reflect.TypeOf(zero).Elem()).Interface().(runtime.Object)
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	return gvks[0]
}

func name(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return ""
	}
	return m.GetName()
}
