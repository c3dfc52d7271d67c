package served

import "k8s.io/apimachinery/pkg/runtime/schema"

// Tracker holds the set of served resources a consumer works with and turns each
// discovery into what changed: the resources to start and the ones to stop. It keeps:
//   - A resource of a group version whose discovery failed this time stays, as it was:
//     its API server not answering once is no reason to drop its informer (upstream's
//     garbage collector keeps the monitors of such groups).
//   - Every other resource is in the set exactly when the last discovery found it; a
//     group whose preferred version changed is one resource stopped and one started.
//
// A Tracker is not safe for concurrent use: one discovery loop owns it.
type Tracker struct {
	current Set
}

// Current returns the resources the consumer works with now.
func (t *Tracker) Current() Set {
	out := make(Set, len(t.current))
	for k, v := range t.current {
		out[k] = v
	}
	return out
}

// Update applies one discovery (Discover's found and failed) and returns the resources
// that appeared and those that are gone, each sorted.
func (t *Tracker) Update(found Set, failed map[schema.GroupVersion]error) (added, removed []Resource) {
	next := make(Set, len(found))
	for k, v := range found {
		next[k] = v
	}
	for k, v := range t.current {
		if _, failedNow := failed[k.GroupVersion()]; failedNow {
			if _, ok := next[k]; !ok {
				next[k] = v // kept until its group answers again
			}
		}
	}
	for k, v := range next {
		if _, ok := t.current[k]; !ok {
			added = append(added, v)
		}
	}
	for k, v := range t.current {
		if _, ok := next[k]; !ok {
			removed = append(removed, v)
		}
	}
	sortResources(added)
	sortResources(removed)
	t.current = next
	return added, removed
}

// forget drops r from the current set, so that the next Update reports it added again
// (its informer could not be had this time).
func (t *Tracker) forget(r Resource) {
	delete(t.current, r.GroupVersionResource)
}
