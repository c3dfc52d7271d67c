package shardcache

import (
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// informer pairs a shared informer with its typed lister. It satisfies client-go's
// generated per-type interfaces (coreinformers.PodInformer, …), so controllers ported
// from kube-controller-manager take the Cache's informers unchanged.
type informer[L any] struct {
	inf    toolscache.SharedIndexInformer
	lister L
}

// Informer returns the shared informer.
func (i informer[L]) Informer() toolscache.SharedIndexInformer { return i.inf }

// Lister returns the typed lister over the informer's store.
func (i informer[L]) Lister() L { return i.lister }

func newInformer[L any](inf toolscache.SharedIndexInformer, lister func(toolscache.Indexer) L) informer[L] {
	return informer[L]{inf: inf, lister: lister(inf.GetIndexer())}
}

// Pods returns the shard's Pod informer (admitted partitions only).
func (c *Cache) Pods() coreinformers.PodInformer {
	return newInformer(c.InformerFor(Pods), corelisters.NewPodLister)
}

// ConfigMaps returns the shard's ConfigMap informer (admitted partitions only).
func (c *Cache) ConfigMaps() coreinformers.ConfigMapInformer {
	return newInformer(c.InformerFor(ConfigMaps), corelisters.NewConfigMapLister)
}

// Secrets returns the shard's Secret informer (admitted partitions only).
func (c *Cache) Secrets() coreinformers.SecretInformer {
	return newInformer(c.InformerFor(Secrets), corelisters.NewSecretLister)
}

// ServiceAccounts returns the shard's ServiceAccount informer (admitted partitions only).
func (c *Cache) ServiceAccounts() coreinformers.ServiceAccountInformer {
	return newInformer(c.InformerFor(ServiceAccounts), corelisters.NewServiceAccountLister)
}

// ReplicaSets returns the shard's ReplicaSet informer (admitted partitions only).
func (c *Cache) ReplicaSets() appsinformers.ReplicaSetInformer {
	return newInformer(c.InformerFor(ReplicaSets), appslisters.NewReplicaSetLister)
}

// Deployments returns the shard's Deployment informer (admitted partitions only).
func (c *Cache) Deployments() appsinformers.DeploymentInformer {
	return newInformer(c.InformerFor(Deployments), appslisters.NewDeploymentLister)
}

// ControllerRevisions returns the shard's ControllerRevision informer (admitted
// partitions only).
func (c *Cache) ControllerRevisions() appsinformers.ControllerRevisionInformer {
	return newInformer(c.InformerFor(ControllerRevisions), appslisters.NewControllerRevisionLister)
}

// Jobs returns the shard's Job informer (admitted partitions only).
func (c *Cache) Jobs() batchinformers.JobInformer {
	return newInformer(c.InformerFor(Jobs), batchlisters.NewJobLister)
}

// CronJobs returns the shard's CronJob informer (admitted partitions only).
func (c *Cache) CronJobs() batchinformers.CronJobInformer {
	return newInformer(c.InformerFor(CronJobs), batchlisters.NewCronJobLister)
}

// Namespaces returns the shard's Namespace informer. Unlike the others it holds every
// namespace of the cluster (namespaces are few, and Prepare needs them); it is indexed by
// PartitionIndex. Controllers that must only act on their own namespaces filter by
// partition themselves, or rely on the shard's work queue, which admits only keys of
// acquired partitions.
func (c *Cache) Namespaces() coreinformers.NamespaceInformer {
	return newInformer(c.nsInformer, corelisters.NewNamespaceLister)
}
