// Package helm is the chart's end-to-end test on a real node (make helm-e2e): helm
// installs kshard into the local control plane, whose one real node (hack/node.sh: a
// kubelet, containerd, kube-proxy and CoreDNS in a network namespace of its own) runs
// kshard's pods from the image `make image` builds, while kwok's nodes run the workloads.
// The steps are a user's: install, a workload and the fence, a cold start (every
// coordinator and shard pod deleted at once), scaling and the disruption budget, a
// coordinator failover and an upgrade, Prometheus scraping the pods through a scrape
// configuration made from the chart's ServiceMonitor with every dashboard query returning
// data (test/framework/dashcheck), uninstall and reinstall.
// Each step logs what it checked; a failed step prints the release's pods, events and
// container logs.
//
// It needs root (network namespaces, the kubelet) and the node up; make helm-e2e starts
// both on a control plane of its own and stops them afterwards.
package helm
