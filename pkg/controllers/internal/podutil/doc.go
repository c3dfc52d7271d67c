// Package podutil answers the questions about a pod that the workload controllers
// (ReplicaSet, Deployment) ask again and again — is it ready, has it been ready long enough
// to count as available, is it active or terminating — with kube-controller-manager's
// definitions, so that both controllers count exactly as upstream does and as each other.
// It holds no state and never talks to the API server.
package podutil
