// Package kubeclient builds the Kubernetes client configuration both kshard binaries use:
// a kubeconfig file when one is named (local runs, tests), the pod's service account
// otherwise (in a cluster) — and checks the client-side rate limit flags, which client-go
// would otherwise turn off without a word when they are not a positive number.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns the REST configuration for kubeconfig ("" means in-cluster) with the
// given user agent, so API server logs and audit events name the kshard component.
//
// Responses come uncompressed, as kube-controller-manager and kube-scheduler ask for
// them: between the control plane and its controllers gzip costs the API server and
// the client more CPU, and adds more latency, than the bytes it saves (kubernetes PR
// 80919). Every shard streams the watch events of the types it caches; with gzip, the
// API server compressed each shard's streams separately.
func Config(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = userAgent
	cfg.DisableCompression = true
	return cfg, nil
}
