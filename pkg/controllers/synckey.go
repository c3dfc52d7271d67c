package controllers

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// StartSync begins a sync of a namespaced object's queue key ("namespace/name"): it splits
// the key and returns ctx carrying a logger that names the object ("namespace", "name";
// RunWorkers' logger already names the controller), that logger, and the namespace and
// name. A malformed key is an error no retry fixes; the sync decides whether to drop it.
func StartSync(ctx context.Context, key string) (_ context.Context, _ klog.Logger, namespace, name string, _ error) {
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return ctx, klog.FromContext(ctx), "", "", fmt.Errorf("invalid key %q: %w", key, err)
	}
	log := klog.FromContext(ctx).WithValues("namespace", namespace, "name", name)
	return klog.NewContext(ctx, log), log, namespace, name, nil
}
