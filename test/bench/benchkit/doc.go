// Package benchkit is what the benchmarks that compare one controller of kshard with
// upstream kube-controller-manager share (test/bench/statefuldaemon,
// test/bench/endpointslice): the configurations compared (upstream, kshard with N shards),
// starting a configuration's controller processes so that both sides run exactly the
// measured controllers at the same flags, metering them and the control plane, their
// clients' requests and rate-limiter waits, and naming what bounded a phase.
//
// A new controller's benchmark brings its workload, its phases and its tables, and takes
// the rest from here:
//
//	side := benchkit.Start(b, f, benchkit.SideOptions{Config: c, Run: run, Controllers: measured, Args: args, ReadyLimit: limit})
//	defer side.Stop()
//	plane := benchkit.ControlPlane(b, f, "kube-apiserver", "etcd")
//	meter := framework.StartMeter(b, append(side.Metered(), plane...)...)
//	ph := benchkit.StartPhase(ctx, b, side.Controllers, append(side.Metered(), plane...)...)
//	… the phase …
//	use := ph.Stop(b) // use.Bound(took, qps, cores), use.TopClient(), use.Cores("etcd", took)
//	run := benchkit.SplitUsage(meter.Stop(b))
package benchkit
