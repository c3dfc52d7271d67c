// Package history keeps a controller's ControllerRevisions as kube-controller-manager's
// history helpers do (the StatefulSet controller's, and the DaemonSet controller's to
// come): revision names and hashes equal to upstream's bit for bit, so that a cluster
// moving from kube-controller-manager to kshard keeps its revisions and starts no
// rollout; listing a parent's revisions (its own and its namespace's orphans) from an
// index by controllerRef; creating a revision under a new name when its name is taken
// by other data (the collision count); renumbering, adopting, releasing and deleting.
package history
