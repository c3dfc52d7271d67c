// Package endpointsubsets puts core/v1 Endpoints subsets in the canonical form
// kube-controller-manager gives them (k8s.io/kubernetes/pkg/api/v1/endpoints'
// RepackSubsets), for the two controllers that read or write Endpoints: the Endpoints
// controller repacks what it writes (and what it finds stored) so that an Endpoints
// upstream wrote compares equal and is not rewritten after a switch, and the
// EndpointSlice mirroring controller repacks what it mirrors so that a subset over its
// limit keeps the addresses upstream keeps and a slice's ports stand in upstream's order.
//
// It is kshard's own code (the product module does not import k8s.io/kubernetes): its
// output is checked against vectors recorded from upstream's function
// (testdata/repack-vectors.json) and against upstream's port order.
package endpointsubsets
