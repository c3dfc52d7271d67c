package benchkit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// Config is one column of a comparison: upstream (Shards 0) or kshard with Shards shards.
type Config struct {
	Name   string
	Shards int
}

// Configs returns upstream (when withUpstream) and kshard-N for each N of shards, in that
// order: the order the benchmarks run them in.
func Configs(withUpstream bool, shards []int) []Config {
	var out []Config
	if withUpstream {
		out = append(out, Config{Name: "upstream"})
	}
	for _, n := range shards {
		out = append(out, Config{Name: fmt.Sprintf("kshard-%d", n), Shards: n})
	}
	return out
}

// Controller is one measured controller process and how to read its client metrics.
type Controller struct {
	Name string
	Pid  int
	// Prefix of its client-go metrics: "kshard_" for a shard, "" for kube-controller-manager.
	Prefix  string
	Metrics func(ctx context.Context) (framework.Samples, error)
}

// SideOptions says what a configuration runs.
type SideOptions struct {
	Config Config
	// Run names the processes (unique per configuration and repetition).
	Run string
	// Controllers are the measured controllers, as kube-controller-manager names them;
	// both sides run exactly these (no housekeeping controllers: the benchmark makes
	// what they would, and the garbage collector's caches would swamp one side's memory).
	Controllers []string
	// Args are the flags kube-controller-manager and a shard both take for them.
	Args []string
	// ReadyLimit bounds the wait for every shard's /readyz.
	ReadyLimit time.Duration
}

// Side is a configuration's running controller processes.
type Side struct {
	Controllers []Controller
	// KShard is the kshard that runs them; nil for upstream.
	KShard *framework.KShard
	stop   func()
}

// Start starts the configuration's processes: a kube-controller-manager with exactly
// opts.Controllers, or a coordinator (kube-controller-manager's leader-election timings)
// and opts.Config.Shards shards running them, each Ready. Stop them with Stop.
func Start(b *testing.B, f *framework.Framework, opts SideOptions) *Side {
	b.Helper()
	if opts.Config.Shards == 0 {
		kcm := f.StartKCM(b, "kcm-"+opts.Run, framework.KCMOptions{Controllers: opts.Controllers, Args: opts.Args, NoHousekeeping: true})
		return &Side{stop: kcm.Kill, Controllers: []Controller{{Name: "kube-controller-manager", Pid: kcm.Pid(), Metrics: kcm.Metrics}}}
	}
	k := f.NewKShard(b, framework.KShardOptions{KCMTimings: true, NoHousekeeping: true,
		ShardArgs: append([]string{"--controllers", strings.Join(opts.Controllers, ",")}, opts.Args...)})
	s := &Side{KShard: k, stop: k.KillAll}
	for _, sh := range k.StartSet(b, opts.Config.Shards) {
		url := sh.HTTPURL
		s.Controllers = append(s.Controllers, Controller{Name: sh.Name, Pid: sh.Pid(), Prefix: "kshard_",
			Metrics: func(ctx context.Context) (framework.Samples, error) { return framework.Scrape(ctx, url) }})
		framework.Eventually(b, opts.ReadyLimit, sh.Name+" Ready", func(ctx context.Context) (bool, error) {
			code, _, err := framework.HTTPGet(ctx, url+"/readyz")
			return err == nil && code == http.StatusOK, err
		})
	}
	return s
}

// Stop kills the side's processes.
func (s *Side) Stop() { s.stop() }

// Metered returns the side's processes to meter over a configuration's run, peaks reset
// when the meter starts: the coordinator (role "coordinator") and every controller
// process (role "controller").
func (s *Side) Metered() []framework.Metered {
	var out []framework.Metered
	if s.KShard != nil {
		out = append(out, framework.Metered{Name: "coordinator", Role: "coordinator", Pid: s.KShard.Coordinators[0].Pid(), ResetPeak: true})
	}
	for _, c := range s.Controllers {
		out = append(out, framework.Metered{Name: c.Name, Role: "controller", Pid: c.Pid, ResetPeak: true})
	}
	return out
}

// Share returns how many of nss each shard owns, by the leading coordinator's assignment,
// and the busiest shard's share; nil and 1 for upstream.
func (s *Side) Share(ctx context.Context, b *testing.B, nss []string) (map[string]int, float64) {
	if s.KShard == nil {
		return nil, 1
	}
	per := s.KShard.NamespacesPerShard(ctx, b, nss)
	return per, framework.BusiestShare(per)
}

// ControlPlane returns the cluster's processes of these names (hack/cluster.sh's) to meter
// beside a configuration (role "plane").
func ControlPlane(b *testing.B, f *framework.Framework, names ...string) []framework.Metered {
	b.Helper()
	out := make([]framework.Metered, 0, len(names))
	for _, name := range names {
		pid, err := f.ComponentPid(name)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, framework.Metered{Name: name, Role: "plane", Pid: pid})
	}
	return out
}
