// Package chart tests the Helm chart (charts/kshard) and the container image: helm lint
// and helm template over the chart's ci/ values files, a server-side dry-run apply to the
// local control plane, the shard ClusterRole against the controllers' declared
// permissions (chart and code cannot drift), and the RBAC proof: the real coordinator and
// shard binaries, run with the rendered Deployments' arguments as the chart's
// ServiceAccounts, become Ready and reconcile, and a shard missing one permission exits
// naming it. The image test builds `make image`'s tarball and inspects it.
package chart
