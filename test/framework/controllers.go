package framework

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
)

// UpstreamControllersEnv, set to 1, declares that the cluster's kube-controller-manager runs
// every upstream controller (as hack/cluster.sh does with the same variable), so tests use
// it instead of starting kshard.
const UpstreamControllersEnv = "KSHARD_UPSTREAM_CONTROLLERS"

// Controllers tells who runs the kube-controller-manager controllers a test package needs:
// the cluster's own kube-controller-manager, or kshard processes the package started.
type Controllers struct {
	// Names are the controllers the package asked for.
	Names []string
	// ByCluster are those the cluster's kube-controller-manager runs.
	ByCluster []string
	// ByKShard are those the package's kshard shards run.
	ByKShard []string
	// KShard runs ByKShard; nil when the cluster runs every controller asked for.
	KShard *KShard
	// ClusterList is the cluster's --controllers value, and where it was read.
	ClusterList, ClusterListFrom string
}

// Upstream reports whether every controller asked for is upstream's own.
func (c *Controllers) Upstream() bool { return len(c.ByKShard) == 0 }

// String says who runs what, for logs and failure messages.
func (c *Controllers) String() string {
	if c == nil {
		return "controllers: unknown"
	}
	var parts []string
	if len(c.ByCluster) > 0 {
		parts = append(parts, fmt.Sprintf("%s by the cluster's kube-controller-manager (--controllers=%s, from %s)",
			strings.Join(c.ByCluster, ","), c.ClusterList, c.ClusterListFrom))
	}
	if len(c.ByKShard) > 0 {
		s := fmt.Sprintf("%s by kshard", strings.Join(c.ByKShard, ","))
		if c.KShard != nil {
			var logs []string
			for _, sh := range c.KShard.Shards {
				state := "running"
				if sh.Exited() {
					state = "EXITED"
				}
				logs = append(logs, fmt.Sprintf("%s %s (log %s)", sh.Name, state, sh.LogPath))
			}
			slices.Sort(logs)
			s += " [" + strings.Join(logs, "; ") + "]"
		}
		parts = append(parts, s)
	}
	return "controllers: " + strings.Join(parts, "; ")
}

// ControllersOptions size the kshard processes MainWithControllers starts when the cluster
// does not run the controllers itself.
type ControllersOptions struct {
	// Names are kube-controller-manager's names of the controllers the tests need. The
	// namespace controller is added: the tests' namespaces are deleted when they end.
	Names []string
	// Coordinators and Shards are how many processes of each to start (default 1 and 2).
	Coordinators, Shards int
	// ShardArgs are added to every shard's flags.
	ShardArgs []string
	// ShardArgsFrom, when set, returns more flags for every shard, computed once the
	// cluster is known (e.g. a file made from its CA); t's cleanups run after the tests.
	ShardArgsFrom func(t testing.TB, f *Framework) ([]string, error)
	// Fence runs the shards with pod identities and the server-side fence
	// (KShardOptions.PodIdentity and Fence), for tests of writes the API server must
	// let through to a namespace's owner only.
	Fence bool
	// FinishNamespaces has the package's own kshard finish the namespaces the tests
	// deleted before it stops, for packages whose shards run every controller those
	// namespaces' content waits for (the namespace controller is always added): the
	// namespace finisher, a kshard of every controller started after the package's stops
	// (finishNamespaces), then has nothing left to do and is not started, which saves its
	// start (its coordinator grants nothing for a session TTL and a margin, 10 s). What is
	// left after ownFinishTimeout is left to the finisher, as without.
	FinishNamespaces bool
	// Parallel, when above 0, is -test.parallel unless the command line gives one: for
	// packages whose tests spend their time waiting for the controllers, not computing,
	// where go test's default (GOMAXPROCS, 2 on CI's machine) runs them in turns.
	Parallel int
}

var sharedControllers *Controllers

// RunningControllers returns who runs the package's controllers; only valid in tests of a
// package whose TestMain calls MainWithControllers.
func RunningControllers(t testing.TB) *Controllers {
	t.Helper()
	if sharedControllers == nil {
		t.Fatal("framework.RunningControllers called without framework.MainWithControllers in TestMain")
	}
	return sharedControllers
}

// MainWithControllers is TestMain for packages whose tests need some of
// kube-controller-manager's controllers running. Like Main it connects to the local control
// plane; then, for each controller the cluster's kube-controller-manager does not run (read
// from the kcm-controllers file hack/cluster.sh writes, see Framework.KCMRuns), it starts kshard
// (coordinators and shards with --controllers set to those), waits until every partition is
// owned, runs the tests, and stops kshard. So the same tests run against upstream
// kube-controller-manager (hack/cluster-upstream.sh) and against kshard.
func MainWithControllers(m *testing.M, opts ControllersOptions) {
	if len(opts.Names) == 0 {
		fmt.Fprintln(os.Stderr, "framework.MainWithControllers: no controller names given")
		os.Exit(2)
	}
	if opts.Parallel > 0 {
		defaultParallel(opts.Parallel)
	}
	f := connectForMain()
	shared = f
	name := "TestMain-" + strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	os.Exit(finishNamespacesAfter(f, name, func() int {
		tb := newMainTB(name)
		return tb.run(func() int {
			c, err := startControllers(tb, f, opts)
			if err != nil {
				tb.Fatalf("%v", err)
			}
			sharedControllers = c
			fmt.Fprintln(os.Stderr, c.String())
			code := m.Run()
			if opts.FinishNamespaces && c.KShard != nil && slices.Contains(c.ByKShard, NamespaceController) {
				took, err := waitNamespacesFinished(f, ownFinishTimeout)
				tb.Logf("waited %s for the package's shards to finish the namespaces deleted by the tests", took.Round(100*time.Millisecond))
				if err != nil {
					tb.Logf("%v; the namespace finisher takes them over", err)
				}
			}
			return code
		})
	}))
}

// defaultParallel sets -test.parallel to n unless the command line gave it.
func defaultParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		fmt.Fprintf(os.Stderr, "framework.MainWithControllers: setting -test.parallel: %v\n", err)
		os.Exit(2)
	}
}

func startControllers(t testing.TB, f *Framework, opts ControllersOptions) (*Controllers, error) {
	names := opts.Names
	if !slices.Contains(names, NamespaceController) {
		// The tests' namespaces are deleted when they end: the shards finish them.
		names = append(slices.Clone(names), NamespaceController)
	}
	c := &Controllers{Names: names, ClusterList: "*", ClusterListFrom: UpstreamControllersEnv + "=1"}
	upstream := os.Getenv(UpstreamControllersEnv) == "1"
	if !upstream {
		list, err := f.KCMControllers()
		if err != nil {
			return nil, fmt.Errorf("%w (hack/cluster.sh records them when it starts kube-controller-manager; "+
				"set %s=1 if this cluster's kube-controller-manager runs every controller)", err, UpstreamControllersEnv)
		}
		c.ClusterList, c.ClusterListFrom = list, filepath.Join(f.ClusterDir(), "kcm-controllers")
	}
	for _, n := range names {
		on := upstream
		if !upstream {
			var err error
			if on, err = f.KCMRuns(n); err != nil {
				return nil, err
			}
		}
		if on {
			c.ByCluster = append(c.ByCluster, n)
		} else {
			c.ByKShard = append(c.ByKShard, n)
		}
	}
	if len(c.ByKShard) == 0 {
		return c, nil
	}
	if err := checkShardKnows(t, c.ByKShard); err != nil {
		return nil, err
	}
	coordinators, shards := max(opts.Coordinators, 1), max(opts.Shards, 1)
	if opts.Shards == 0 {
		shards = 2
	}
	args := append([]string{"--controllers", strings.Join(c.ByKShard, ",")}, opts.ShardArgs...)
	if opts.ShardArgsFrom != nil {
		more, err := opts.ShardArgsFrom(t, f)
		if err != nil {
			return nil, err
		}
		args = append(args, more...)
	}
	k := f.NewKShard(t, KShardOptions{ShardArgs: args, PodIdentity: opts.Fence, Fence: opts.Fence})
	for i := range coordinators {
		k.StartCoordinator(fmt.Sprintf("coordinator-%d", i))
	}
	for i := range shards {
		k.StartShard(fmt.Sprintf("shard-%d", i))
	}
	c.KShard = k
	if err := waitOwned(k, 90*time.Second); err != nil {
		return nil, fmt.Errorf("%v\n%s", err, c)
	}
	for _, s := range k.Shards {
		WaitHTTP(t, s.HTTPURL+"/readyz", 60*time.Second)
	}
	return c, nil
}

// checkShardKnows fails early, with a clear message, when the built shard binary predates
// one of the controllers.
func checkShardKnows(t testing.TB, names []string) error {
	bin := Binary(t, "shard")
	b, _ := exec.Command(bin, "--help").CombinedOutput()
	out := string(b)
	for _, n := range names {
		if !strings.Contains(out, n) {
			return fmt.Errorf("%s does not know controller %q (its --help does not name it): run 'make build'", bin, n)
		}
	}
	return nil
}

// waitOwned waits until the leading coordinator reports a converged assignment in which
// every live shard owns partitions, and every live shard works all it owns.
func waitOwned(k *KShard, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		last = func() error {
			l, err := k.Leader(ctx)
			if err != nil {
				return err
			}
			a, err := l.Assignments(ctx)
			if err != nil {
				return err
			}
			if !a.Converged {
				return fmt.Errorf("assignment not converged: %v", a.ByState)
			}
			live := k.Live()
			owners := 0
			for _, s := range a.Shards {
				if s.Partitions > 0 && live[s.Shard] {
					owners++
				}
				if s.Partitions > 0 && !live[s.Shard] {
					// A killed shard whose session has not expired yet: its partitions
					// move later, while the tests run.
					return fmt.Errorf("shard %s, which no longer runs, still owns %d partitions", s.Shard, s.Partitions)
				}
			}
			if owners != len(live) || len(live) == 0 {
				return fmt.Errorf("%d of %d live shards own partitions", owners, len(live))
			}
			// The coordinator counts a partition owned once the shard confirms the Acquire,
			// which it does at once; the shard works it only after its caches are listed
			// again (a refresh after a move), which after a scale-in can take long enough
			// that a test's first change goes unseen until then.
			return k.workingAssigned(ctx, a.Shards, live)
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kshard did not take every partition within %s: %v", timeout, last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// mainTB lets TestMain use the helpers that take a testing.TB (processes, PKI, ports): it
// runs cleanups at the end and turns FailNow into a non-zero exit. Only the goroutine that
// calls run may call FailNow.
type mainTB struct {
	testing.TB // nil; present only for the interface's unexported method
	name       string
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
	ctx        context.Context
	cancel     context.CancelFunc
}

type mainFailNow struct{}

func newMainTB(name string) *mainTB {
	ctx, cancel := context.WithCancel(context.Background())
	return &mainTB{name: name, ctx: ctx, cancel: cancel}
}

// run calls body and then the cleanups; it returns body's code, or 1 when body failed.
func (m *mainTB) run(body func() int) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(mainFailNow); !ok {
				panic(r)
			}
			code = 1
		}
		m.cancel()
		m.mu.Lock()
		cs := m.cleanups
		m.cleanups = nil
		m.mu.Unlock()
		for i := len(cs) - 1; i >= 0; i-- {
			cs[i]()
		}
		if m.Failed() && code == 0 {
			code = 1
		}
	}()
	return body()
}

func (m *mainTB) ArtifactDir() string    { return ArtifactsDir(m) }
func (m *mainTB) Attr(key, value string) {}
func (m *mainTB) Cleanup(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cleanups = append(m.cleanups, f)
}
func (m *mainTB) Error(args ...any) { m.Log(args...); m.Fail() }
func (m *mainTB) Errorf(format string, args ...any) {
	m.Logf(format, args...)
	m.Fail()
}
func (m *mainTB) Fail() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = true
}
func (m *mainTB) FailNow() { m.Fail(); panic(mainFailNow{}) }
func (m *mainTB) Failed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}
func (m *mainTB) Fatal(args ...any) { m.Log(args...); m.FailNow() }
func (m *mainTB) Fatalf(format string, args ...any) {
	m.Logf(format, args...)
	m.FailNow()
}
func (m *mainTB) Helper()         {}
func (m *mainTB) Log(args ...any) { fmt.Fprintln(os.Stderr, append([]any{m.name + ":"}, args...)...) }
func (m *mainTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, m.name+": "+format+"\n", args...)
}
func (m *mainTB) Name() string { return m.name }
func (m *mainTB) Setenv(key, value string) {
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		m.Fatal(err)
	}
	m.Cleanup(func() {
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}
func (m *mainTB) Chdir(dir string) {
	prev, err := os.Getwd()
	if err != nil {
		m.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		m.Fatal(err)
	}
	m.Cleanup(func() { _ = os.Chdir(prev) })
}

// Skipping is not possible in TestMain: it fails instead, saying why.
func (m *mainTB) Skip(args ...any) { m.Fatal(append([]any{"skip in TestMain:"}, args...)...) }
func (m *mainTB) SkipNow()         { m.Fatal("skip in TestMain") }
func (m *mainTB) Skipf(format string, args ...any) {
	m.Fatalf("skip in TestMain: "+format, args...)
}
func (m *mainTB) Skipped() bool { return false }
func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "kshard-main-")
	if err != nil {
		m.Fatal(err)
	}
	m.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
func (m *mainTB) Context() context.Context { return m.ctx }
func (m *mainTB) Output() io.Writer        { return os.Stderr }

var _ testing.TB = (*mainTB)(nil)

// workingAssigned reports an error unless every live shard of shards works (its
// kshard_shard_acquired_partitions) as many partitions as the coordinator assigns it.
func (k *KShard) workingAssigned(ctx context.Context, shards []coordinatorrpc.ShardView, live map[string]bool) error {
	k.mu.Lock()
	procs := make(map[string]*Shard, len(k.Shards))
	for n, s := range k.Shards {
		procs[n] = s
	}
	k.mu.Unlock()
	for _, v := range shards {
		s := procs[v.Shard]
		if s == nil || !live[v.Shard] {
			continue
		}
		working, err := Metric(ctx, s.HTTPURL, "kshard_shard_acquired_partitions")
		if err != nil {
			return fmt.Errorf("shard %s: %w", v.Shard, err)
		}
		if int(working) != v.Partitions {
			return fmt.Errorf("shard %s works %d of the %d partitions it owns (listing moved ones again)", v.Shard, int(working), v.Partitions)
		}
	}
	return nil
}
