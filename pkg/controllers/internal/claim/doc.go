// Package claim decides which objects a controller owns: it adopts orphans its selector
// matches and releases the ones it controls that the selector no longer matches, with
// kube-controller-manager's controllerRef rules (an object controlled by someone else is
// never touched; a controller being deleted adopts and releases nothing; an object being
// deleted is not adopted). The ReplicaSet controller claims pods with it, the Deployment
// controller ReplicaSets. ControllerOf resolves a dependent's controller reference to the
// cached owner, for the event handlers of every controller that owns objects.
package claim
