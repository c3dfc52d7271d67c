package tombstone

import (
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// Unwrap returns the object of a delete event as a T, whether it came as a T or inside a
// tombstone. An object of another type is reported (utilruntime.HandleError) and ok is
// false: a handler registered for T's informer never expects one.
func Unwrap[T any](obj any) (T, bool) {
	if o, ok := obj.(T); ok {
		return o, true
	}
	var zero T
	tomb, ok := obj.(toolscache.DeletedFinalStateUnknown)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("delete handler: unexpected object %T, want %T", obj, zero))
		return zero, false
	}
	o, ok := tomb.Obj.(T)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("delete handler: tombstone holds %T, want %T", tomb.Obj, zero))
	}
	return o, ok
}
