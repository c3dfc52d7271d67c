// Package tombstone unwraps the objects of informer delete events, which arrive as
// client-go's DeletedFinalStateUnknown when the informer missed the deletion itself
// (a relist found the object gone). Every controller's delete handlers use it.
package tombstone
