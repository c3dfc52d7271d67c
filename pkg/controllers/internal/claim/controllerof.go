package claim

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ControllerOf resolves a controller reference as kube-controller-manager's controllers
// do before they act on an event of a dependent: the object get (a lister of the
// dependent's namespace) returns for ref's name, when ref names kind and the cached
// object has ref's UID; otherwise the zero value (nil for a pointer type). A reference to
// an object that was deleted and made again under its name must not reach the new one.
func ControllerOf[T metav1.Object](kind string, ref *metav1.OwnerReference, get func(name string) (T, error)) T {
	var none T
	if ref == nil || ref.Kind != kind {
		return none
	}
	obj, err := get(ref.Name)
	if err != nil || obj.GetUID() != ref.UID {
		return none
	}
	return obj
}
