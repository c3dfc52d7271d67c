// Package consistency makes a controller's sync wait until its informers have seen the
// controller's own last writes for the object it syncs: kube-controller-manager 1.37's
// StaleControllerConsistency (on by default for the Job, ReplicaSet and StatefulSet
// controllers). A controller records, per owner object, the resourceVersion of each
// write it makes (the owner's status, the pods it creates or patches); the next sync of
// that owner first asks Ready, which fails with a *StaleError while an informer's store is
// older than a recorded write, and the work queue retries the key with backoff. Without it
// a sync right after a write can act on a cache that does not show the write yet (count a
// pod twice, create a pod the last sync already created) whenever expectations do not
// cover the write (adoptions, status writes).
package consistency
