package framework

import (
	"context"
	"time"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
)

// installFence installs the server-side fence for this KShard's shard ServiceAccount, as
// the chart does (a policy and binding named after the KShard, the owner ConfigMap in
// its pod namespace), and removes it when the test ends: first the binding, so that no
// moment refuses writes the test does not expect.
func (k *KShard) installFence(suffix string) {
	k.t.Helper()
	p := ownerrecord.PolicyParams{
		Name:           "kshard-e2e-fence-" + k.f.RunID + "-" + suffix,
		Namespace:      k.pods.namespace,
		ServiceAccount: ShardServiceAccount,
		ConfigMap:      "kshard-owners",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ownerrecord.Install(ctx, k.f.Client, p); err != nil {
		k.t.Fatalf("installing the shard fence: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ownerrecord.Uninstall(ctx, k.f.Client, p); err != nil {
			k.t.Errorf("removing the shard fence: %v", err)
		}
	})
	k.fence = &p
}

// FenceParams returns the fence's names (nil without KShardOptions.Fence).
func (k *KShard) FenceParams() *ownerrecord.PolicyParams { return k.fence }
