package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordapp "github.com/kshard/kshard/cmd/coordinator/app"
	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/testpki"
)

// KShardOptions size a set of kshard processes for a test.
type KShardOptions struct {
	Partitions int
	SessionTTL time.Duration
	Margin     time.Duration
	// ShardArgs are added to every shard's flags (e.g. --controllers).
	ShardArgs []string
	// CoordinatorArgs are added to every coordinator's flags.
	CoordinatorArgs []string
	// ShardBinary is the shard executable; empty means the one `make build` made. A test
	// that adds controllers of its own builds its own (BuildShard).
	ShardBinary string
	// Audit runs the shards from AuditShardBinary, the shard with the test-only
	// kshard-audit controller (which --controllers in ShardArgs must still enable), and
	// with PodIdentity grants the shards its permissions too.
	Audit bool
	// PodIdentity gives every shard the identity a shard pod has in a cluster: a
	// namespace of this KShard with the ServiceAccount ShardServiceAccount, bound to a
	// ClusterRole with what a shard needs, and per shard ID a pod of that name on a fake
	// node whose bound tokens the shard uses, for the API server (--kubeconfig) and for the
	// coordinator (--coordinator-token-file). The coordinators then verify them
	// (--shard-auth=token). Off, shards use the admin kubeconfig and the coordinators take
	// every claimed shard ID on trust (--shard-auth=none).
	PodIdentity bool
	// Fence turns on the server-side fence (needs PodIdentity): the framework installs the
	// fence's ValidatingAdmissionPolicies and bindings of its own for this KShard's shard
	// ServiceAccount (ownerrecord.Install) and the coordinators, acting as
	// CoordinatorServiceAccount, write the owner record (--shard-fence). Off, coordinators
	// run with the admin kubeconfig and --shard-fence=false.
	Fence bool
	// NoHousekeeping keeps the shards' --controllers exactly as ShardArgs give it, without
	// the HousekeepingControllers the framework otherwise adds (see there).
	NoHousekeeping bool
	// ShardPermissions are granted to the shards' ServiceAccount (with PodIdentity) beyond
	// what the shard and its registered controllers need: for a test's own controllers.
	ShardPermissions []controllers.Permission
	// ShardGroups names the shard group of shards by ID: such a shard runs with
	// --shard-group, and with PodIdentity its pod carries the label kshard.io/shard-group
	// (shardauth.GroupLabel) that the coordinators check the claim against. Shards not
	// named are in the default group.
	ShardGroups map[string]string
	// KCMTimings runs the coordinators with kube-controller-manager's leader-election
	// timings (15 s Lease, 10 s renew deadline, 2 s retry) and, unless set above, the
	// coordinator's default session TTL and fencing margin, for benchmarks: the tests'
	// 4 s Lease fails over fast, but a loaded 2-core machine that starves a coordinator
	// for a few seconds takes leadership from it and ends a benchmark's repetition. The
	// coordinator refuses a Lease longer than the session TTL allows, so the two go
	// together.
	KCMTimings bool
}

// KShard runs coordinators and shards as real processes against the local control
// plane, with mutual TLS between them, and kills them all when the test ends.
type KShard struct {
	t            testing.TB
	f            *Framework
	opts         KShardOptions
	pki          PKI
	leaseName    string
	shardArgs    func(name string) []string
	coordAddrs   func(name string, addrs []string) []string
	pods         *podIdentity              // nil without PodIdentity
	fence        *ownerrecord.PolicyParams // nil without Fence
	mu           sync.Mutex
	Coordinators []*Coordinator
	Shards       map[string]*Shard

	// coordinatorKubeconfig is the coordinators' kubeconfig with Fence (as
	// CoordinatorServiceAccount); empty without: the admin's.
	coordinatorKubeconfig string
}

// Coordinator is one coordinator replica.
type Coordinator struct {
	*Process
	Name     string
	GRPCAddr string
	HTTPURL  string
}

// Shard is one shard process.
type Shard struct {
	*Process
	Name    string
	HTTPURL string
}

// NewKShard prepares a set of processes; start them with StartCoordinator and StartShard.
func (f *Framework) NewKShard(t testing.TB, opts KShardOptions) *KShard {
	if opts.Partitions == 0 {
		opts.Partitions = 4096
	}
	if opts.SessionTTL == 0 && opts.KCMTimings {
		opts.SessionTTL = coordapp.DefaultSessionTTL
	}
	if opts.Margin == 0 && opts.KCMTimings {
		opts.Margin = handoff.DefaultMargin
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = 9 * time.Second // above the failover budget of the leases below: 1s + 4s + 2×1.1s + 1s = 8.2s
	}
	if opts.Margin == 0 {
		opts.Margin = time.Second
	}
	if opts.Audit {
		if opts.ShardBinary != "" {
			t.Fatal("KShardOptions: Audit runs the audit shard, not ShardBinary")
		}
		opts.ShardBinary = Binary(t, AuditShardBinary)
		opts.ShardPermissions = append(slices.Clip(opts.ShardPermissions), audit.Descriptor().AllPermissions()...)
	}
	suffix := strings.ToLower(strconv.FormatInt(time.Now().UnixNano()%1e6, 36))
	k := &KShard{t: t, f: f, opts: opts, pki: NewPKI(t), leaseName: "kshard-e2e-" + f.RunID + "-" + suffix,
		Shards: map[string]*Shard{}}
	if opts.PodIdentity {
		k.setupPodIdentity(suffix)
	}
	if opts.Fence {
		if !opts.PodIdentity {
			t.Fatal("KShardOptions.Fence needs PodIdentity: the fence tells shards apart by their pod-bound tokens")
		}
		k.installFence(suffix)
	}
	return k
}

// HousekeepingControllers are the controllers every namespace needs for a test to use it
// and to be rid of it, which kshard implements and the local kube-controller-manager
// therefore no longer runs: without the default ServiceAccount the API server refuses
// every pod of a namespace (the ServiceAccount admission plugin), pods expect
// kube-root-ca.crt, and a deleted namespace stays Terminating until a namespace
// controller finishes it (a benchmark waits for its namespaces to be gone between runs);
// without a garbage collector a ReplicaSet's pods outlive it and an object deleted in the
// foreground (the TTL controller deletes Jobs so) is never gone. Shards a test
// starts with a --controllers list run them too (StartShard adds them, unless
// KShardOptions.NoHousekeeping), the way a cluster's kube-controller-manager would, so a
// test of other controllers finds its namespaces usable. A --controllers entry "-name"
// still switches one off.
var HousekeepingControllers = []string{"serviceaccount", "root-ca-cert-publisher", NamespaceController, "garbagecollector"}

// housekeeping returns the flag that adds, to a shard's --controllers list in args, the
// HousekeepingControllers the cluster's kube-controller-manager does not run. Without a
// --controllers flag the shard runs "*", which has them all.
func (k *KShard) housekeeping(args []string) []string {
	if k.opts.NoHousekeeping || !slices.ContainsFunc(args, func(a string) bool {
		return a == "--controllers" || strings.HasPrefix(a, "--controllers=")
	}) {
		return nil
	}
	add := k.f.missingHousekeeping()
	if len(add) == 0 {
		return nil
	}
	// --controllers is a string slice: a second occurrence appends to the first, and an
	// explicit "-name" earlier in the list wins (Selection.Enabled reads it first).
	return []string{"--controllers", strings.Join(add, ",")}
}

// missingHousekeeping returns the HousekeepingControllers the cluster's
// kube-controller-manager does not run, which a controller process a test starts must run
// itself for the test's namespaces to be usable.
func (f *Framework) missingHousekeeping() []string {
	if os.Getenv(UpstreamControllersEnv) == "1" {
		return nil // the cluster's kube-controller-manager runs every controller
	}
	var add []string
	for _, n := range HousekeepingControllers {
		if on, err := f.KCMRuns(n); err == nil && on {
			continue
		}
		add = append(add, n)
	}
	return add
}

// SetShardArgs adds per-shard flags (e.g. a file named after the shard).
func (k *KShard) SetShardArgs(fn func(name string) []string) { k.shardArgs = fn }

// SetShardCoordinators changes the coordinator addresses a shard is given (every replica
// started so far, by default): e.g. a proxy a test can cut, to leave one shard alive but
// unable to reach any coordinator. fn gets the shard's name and the default addresses.
func (k *KShard) SetShardCoordinators(fn func(name string, addrs []string) []string) {
	k.coordAddrs = fn
}

// StartCoordinator starts a coordinator replica with leader election on.
func (k *KShard) StartCoordinator(name string) *Coordinator {
	k.t.Helper()
	return k.StartCoordinatorAt(name, fmt.Sprintf("127.0.0.1:%d", FreePort(k.t)))
}

// StartCoordinatorAt starts a coordinator replica serving sessions at grpcAddr: the
// address of a dead replica, for a replacement that shards started earlier can reach, as
// a restarted pod behind the chart's stable address is.
func (k *KShard) StartCoordinatorAt(name, grpcAddr string) *Coordinator {
	k.t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", FreePort(k.t))
	lease, renew, retry := "4s", "3s", "500ms"
	if k.opts.KCMTimings {
		lease, renew, retry = "15s", "10s", "2s"
	}
	kubeconfig := k.f.Kubeconfig
	if k.coordinatorKubeconfig != "" {
		kubeconfig = k.coordinatorKubeconfig
	}
	args := []string{
		"--kubeconfig", kubeconfig, "--id", name,
		"--grpc-bind-address", grpcAddr, "--advertise-address", grpcAddr, "--http-bind-address", httpAddr,
		"--grpc-tls-cert-file", k.pki.ServerCert, "--grpc-tls-private-key-file", k.pki.ServerKey, "--grpc-tls-client-ca-file", k.pki.CA,
		"--leader-elect-resource-namespace", "kube-system", "--leader-elect-resource-name", k.leaseName,
		"--leader-elect-lease-duration", lease, "--leader-elect-renew-deadline", renew, "--leader-elect-retry-period", retry,
		"--partitions", strconv.Itoa(k.opts.Partitions),
		"--session-ttl", k.opts.SessionTTL.String(), "--fencing-margin", k.opts.Margin.String(),
		"--membership-debounce", "1s", "--membership-max-debounce", "5s",
	}
	if k.pods != nil {
		// Each shard's coordinator token is bound to its pod, named after the shard ID. The
		// coordinator's kubeconfig may create TokenReviews (admin, or with Fence
		// CoordinatorServiceAccount bound to cluster-admin).
		args = append(args, "--shard-auth", "token",
			"--shard-service-account", k.pods.namespace+"/"+ShardServiceAccount,
			"--shard-token-audience", k.pods.audience)
	} else {
		// Without PodIdentity, local shard processes have no pod-bound ServiceAccount token
		// to prove their identity with; mutual TLS still authenticates them as a group.
		args = append(args, "--shard-auth", "none")
	}
	if k.fence != nil {
		args = append(args, "--shard-fence=true", "--shard-fence-partition-label", k.fence.PartitionLabel, "--shard-fence-policy", k.fence.Name)
	} else {
		args = append(args, "--shard-fence=false")
	}
	args = append(args, k.opts.CoordinatorArgs...)
	c := &Coordinator{Process: Start(k.t, name, Binary(k.t, "coordinator"), args...), Name: name, GRPCAddr: grpcAddr, HTTPURL: "http://" + httpAddr}
	k.mu.Lock()
	k.Coordinators = append(k.Coordinators, c)
	k.mu.Unlock()
	return c
}

// StartShard starts a shard that knows every coordinator started so far. With
// PodIdentity it authenticates with the tokens of its pod (ShardIdentity), which a
// restarted shard of the same name reuses.
func (k *KShard) StartShard(name string) *Shard {
	k.t.Helper()
	var creds ShardCredentials
	if k.pods != nil {
		creds = k.ShardIdentity(name).Credentials()
	}
	return k.StartShardAs(name, creds)
}

// StartShardAs starts shard name with the given credentials, whatever identity it is
// given: e.g. another shard's, to see the coordinator refuse it.
func (k *KShard) StartShardAs(name string, creds ShardCredentials) *Shard {
	k.t.Helper()
	kubeconfig := creds.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = k.f.Kubeconfig
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", FreePort(k.t))
	var addrs []string
	k.mu.Lock()
	for _, c := range k.Coordinators {
		addrs = append(addrs, c.GRPCAddr)
	}
	k.mu.Unlock()
	if k.coordAddrs != nil {
		addrs = k.coordAddrs(name, addrs)
	}
	args := []string{
		"--kubeconfig", kubeconfig, "--shard-id", name, "--http-bind-address", httpAddr,
		"--coordinator-address", strings.Join(addrs, ","),
		"--grpc-tls-ca-file", k.pki.CA, "--grpc-tls-cert-file", k.pki.ClientCert, "--grpc-tls-private-key-file", k.pki.ClientKey,
		"--partitions", strconv.Itoa(k.opts.Partitions), "--leave-timeout", "60s",
	}
	if creds.CoordinatorTokenFile != "" {
		args = append(args, "--coordinator-token-file", creds.CoordinatorTokenFile)
	}
	if g := k.opts.ShardGroups[name]; g != "" {
		args = append(args, "--shard-group", g)
	}
	args = append(args, k.opts.ShardArgs...)
	// KSHARD_TEST_SHARD_ARGS adds flags to every shard of every test, e.g.
	// --server-side-filtering to run a suite with the API server filtering.
	args = append(args, strings.Fields(os.Getenv("KSHARD_TEST_SHARD_ARGS"))...)
	if k.shardArgs != nil {
		args = append(args, k.shardArgs(name)...)
	}
	args = append(args, k.housekeeping(args)...)
	bin := k.opts.ShardBinary
	if bin == "" {
		bin = Binary(k.t, "shard")
	}
	s := &Shard{Process: Start(k.t, name, bin, args...), Name: name, HTTPURL: "http://" + httpAddr}
	k.mu.Lock()
	k.Shards[name] = s
	k.mu.Unlock()
	return s
}

// StartSet starts a coordinator ("coordinator") and n shards (shard-1 … shard-n) after
// GuardAlone, and waits until every shard owns partitions; it returns the shards in order.
func (k *KShard) StartSet(t testing.TB, n int) []*Shard {
	t.Helper()
	k.GuardAlone(t)
	k.StartCoordinator("coordinator")
	shards := make([]*Shard, 0, n)
	for i := 1; i <= n; i++ {
		shards = append(shards, k.StartShard(fmt.Sprintf("shard-%d", i)))
	}
	k.WaitAllOwned(t, 90*time.Second)
	return shards
}

// KillAll ends every shard and coordinator of k at once (the test's cleanup would, later):
// for a benchmark whose next run must find the cluster without them.
func (k *KShard) KillAll() {
	k.mu.Lock()
	shards := make([]*Shard, 0, len(k.Shards))
	for _, s := range k.Shards {
		shards = append(shards, s)
	}
	coordinators := append([]*Coordinator(nil), k.Coordinators...)
	k.mu.Unlock()
	for _, s := range shards {
		s.Kill()
	}
	for _, c := range coordinators {
		c.Kill()
	}
}

// Live returns the shards whose processes still run.
func (k *KShard) Live() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]bool{}
	for n, s := range k.Shards {
		if !s.Exited() {
			out[n] = true
		}
	}
	return out
}

// Leader returns the coordinator whose /readyz answers 200 (only the leader is Ready).
func (k *KShard) Leader(ctx context.Context) (*Coordinator, error) {
	k.mu.Lock()
	cs := append([]*Coordinator(nil), k.Coordinators...)
	k.mu.Unlock()
	for _, c := range cs {
		if c.Exited() {
			continue
		}
		// A frozen (SIGSTOP) replica accepts the connection and never answers: it must not
		// use up ctx for the replicas after it.
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		code, _, err := HTTPGet(rctx, c.HTTPURL+"/readyz")
		cancel()
		if err == nil && code == http.StatusOK {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no coordinator is Ready (leading)")
}

// Assignments asks a coordinator for GET /assignments?partitions=true.
func (c *Coordinator) Assignments(ctx context.Context) (coordinatorrpc.Assignments, error) {
	var a coordinatorrpc.Assignments
	code, body, err := HTTPGet(ctx, c.HTTPURL+"/assignments?partitions=true")
	if err != nil {
		return a, err
	}
	if code != http.StatusOK {
		return a, fmt.Errorf("GET /assignments: %d %s", code, body)
	}
	return a, json.Unmarshal(body, &a)
}

// Metric returns the sum of the samples of a metric on a process's /metrics whose labels
// match every one of match (e.g. `shard="s-1"`).
func Metric(ctx context.Context, baseURL, name string, match ...string) (float64, error) {
	s, err := Scrape(ctx, baseURL)
	if err != nil {
		return 0, err
	}
	return s.Value(name, match...), nil
}

// Owners maps each partition to its owner in an assignments answer.
func Owners(a coordinatorrpc.Assignments) map[uint32]string {
	out := map[uint32]string{}
	for _, s := range a.Shards {
		for _, p := range s.PartitionIDs {
			out[p] = s.Shard
		}
	}
	return out
}

// NamespacesPerShard counts nss by the shard that owns each in the leading coordinator's
// assignment: how a benchmark's work fell over the shards.
func (k *KShard) NamespacesPerShard(ctx context.Context, tb testing.TB, nss []string) map[string]int {
	tb.Helper()
	leader, err := k.Leader(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := leader.Assignments(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	owners := Owners(a)
	pmap, err := partition.NewMap(a.PartitionCount)
	if err != nil {
		tb.Fatal(err)
	}
	per := map[string]int{}
	for _, ns := range nss {
		per[owners[uint32(pmap.For(ns))]]++
	}
	return per
}

// BusiestShare is the largest count of per over their sum: with work spread evenly within
// each shard, 1/BusiestShare is the speedup the shards can reach (the even-split ceiling).
func BusiestShare(per map[string]int) float64 {
	most, sum := 0, 0
	for _, n := range per {
		most, sum = max(most, n), sum+n
	}
	if sum == 0 {
		return 0
	}
	return float64(most) / float64(sum)
}

// AuditShardBinary is the shard with the test-only kshard-audit controller
// (test/cmd/audit-shard), which `make build` builds beside the shard (KShardOptions.Audit).
const AuditShardBinary = "audit-shard"

// AuditDir is the (empty) folder the shards' audit logs go to.
func AuditDir(t testing.TB) string {
	dir := filepath.Join(ArtifactsDir(t), "audit")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// HTTPGet GETs url with a timeout and returns the status code and body.
func HTTPGet(ctx context.Context, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return HTTPGetWith(ctx, http.DefaultClient, url)
}

// HTTPGetWith GETs url with client (for example one that dials a Unix socket) and
// returns the status code and body; ctx bounds it.
func HTTPGetWith(ctx context.Context, client *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// BuildShard builds the main package pkg (an import path, e.g. a shard command with
// controllers of a test's own) into the test's temporary folder and returns its path.
func BuildShard(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "shard")
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// PKI is testpki.PKI: the certificates of one KShard's mutual TLS.
type PKI = testpki.PKI

// NewPKI is testpki.New.
func NewPKI(t testing.TB) PKI { return testpki.New(t) }

// NamespaceOwner asks the leading coordinator who owns ns, and in which state
// (GET /assignments?namespace=ns).
func (k *KShard) NamespaceOwner(ctx context.Context, ns string) (coordinatorrpc.Owner, error) {
	var o coordinatorrpc.Owner
	l, err := k.Leader(ctx)
	if err != nil {
		return o, err
	}
	code, body, err := HTTPGet(ctx, l.HTTPURL+"/assignments?namespace="+ns)
	if err != nil {
		return o, err
	}
	if code != http.StatusOK {
		return o, fmt.Errorf("GET /assignments?namespace=%s: %d %s", ns, code, body)
	}
	return o, json.Unmarshal(body, &o)
}

// StableOwner waits until ns is owned (state "owned") by a live shard of k and returns
// that shard.
func (k *KShard) StableOwner(t testing.TB, ns string) *Shard {
	t.Helper()
	var owner *Shard
	Eventually(t, 60*time.Second, "namespace "+ns+" owned by a live shard", func(ctx context.Context) (bool, error) {
		o, err := k.NamespaceOwner(ctx, ns)
		if err != nil {
			return false, err
		}
		k.mu.Lock()
		s := k.Shards[o.Shard]
		k.mu.Unlock()
		if o.State != "owned" || s == nil || s.Exited() {
			return false, fmt.Errorf("owner %+v", o)
		}
		owner = s
		return true, nil
	})
	return owner
}
