package expectations

import "k8s.io/apimachinery/pkg/util/sets"

// Expect replaces key's expectations with adds creations and the tracked deletions of
// the objects keyed objKeys (namespace/name), for a controller that creates and deletes
// in one pass (the DaemonSet controller).
func (e *Expectations) Expect(key string, adds int, objKeys []string) {
	e.set(key, &pending{adds: adds, deleting: sets.New(objKeys...)})
}
