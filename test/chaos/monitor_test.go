package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/test/framework"
)

var execCommand = exec.Command

func metavOptions() metav1.DeleteOptions { return metav1.DeleteOptions{} }

// monitor watches the run from its own goroutine, once a second:
//   - the leader's assignments: its term (never lower than one seen before from a leader,
//     reported), whether the adversary owns anything (a violation), how long the
//     assignment stayed unconverged;
//   - every other second, the fence probe: a dry-run write as a shard in a namespace
//     whose partition the owner record (stable for 2s) grants another shard must be refused by the
//     policy; one accepted is a late write of a non-owner accepted (a violation);
//   - every 5s, the API server's count of the policy's denials (summed across API
//     server restarts).
type monitor struct {
	t     *testing.T
	f     *framework.Framework
	k     *framework.KShard
	w     *workload
	fence *ownerrecord.PolicyParams
	rng   *rand.Rand
	stopc chan struct{}
	done  chan struct{}

	mu                 sync.Mutex
	maxTerm            uint32
	termDrops          []string
	advOwned           []string
	polls, noLeader    int
	unconvergedSince   time.Time
	longestUnconverged time.Duration

	seen         map[string]nsObs
	clients      map[string]kubernetes.Interface
	probes       map[string]int
	lateAccepted []string
	ownerRefused []string

	denialPaused           bool
	denialBase, denialLast float64

	// fenceOff is set while the chaos run has deleted the fence's binding: a non-owner's
	// write accepted then is what the fault does, counted apart, not a violation.
	fenceOff bool
}

type nsObs struct {
	owner, rv string
	since     time.Time
}

func startMonitor(ctx context.Context, t *testing.T, f *framework.Framework, k *framework.KShard, w *workload, seed uint64) *monitor {
	m := &monitor{t: t, f: f, k: k, w: w, fence: k.FenceParams(), rng: rand.New(rand.NewPCG(seed, 3)),
		stopc: make(chan struct{}), done: make(chan struct{}),
		seen: map[string]nsObs{}, clients: map[string]kubernetes.Interface{}, probes: map[string]int{}}
	m.sampleDenials()
	go func() {
		defer close(m.done)
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-m.stopc:
				return
			case <-time.After(time.Second):
			}
			m.pollAssignments(ctx)
			if i%2 == 0 {
				m.probe(ctx)
			}
			if i%5 == 0 {
				m.sampleDenials()
			}
		}
	}()
	return m
}

func (m *monitor) stop() {
	close(m.stopc)
	<-m.done
	m.sampleDenials()
}

func (m *monitor) term() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxTerm
}

func (m *monitor) pollAssignments(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := time.Now()
	l, err := m.k.Leader(ctx)
	var converged bool
	if err == nil {
		a, aerr := l.Assignments(ctx)
		if aerr == nil {
			m.mu.Lock()
			if a.Term < m.maxTerm {
				m.termDrops = append(m.termDrops, fmt.Sprintf("%s: %s answered as leader with term %d after term %d was seen", now.Format("15:04:05.000"), l.Name, a.Term, m.maxTerm))
			}
			m.maxTerm = max(m.maxTerm, a.Term)
			m.mu.Unlock()
			for _, s := range a.Shards {
				if s.Shard == adversaryID && s.Partitions > 0 {
					m.mu.Lock()
					m.advOwned = append(m.advOwned, fmt.Sprintf("%s: the adversary owns %d partitions (leader %s, term %d)", now.Format("15:04:05.000"), s.Partitions, l.Name, a.Term))
					m.mu.Unlock()
				}
			}
			converged = a.Converged && a.MovesInFlight == 0
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.polls++
	if err != nil {
		m.noLeader++
	}
	switch {
	case converged:
		if !m.unconvergedSince.IsZero() {
			m.longestUnconverged = max(m.longestUnconverged, now.Sub(m.unconvergedSince))
		}
		m.unconvergedSince = time.Time{}
	case m.unconvergedSince.IsZero():
		m.unconvergedSince = now
	}
}

// probe writes (dry run) as a shard that the owner record does not grant a workload
// namespace's partition; see monitor.
func (m *monitor) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The owner record (the owner Roles and RoleBindings), to know each workload
	// namespace's owner and how long the record has been stable.
	rec, err := m.record(ctx)
	if err != nil {
		m.count("owner record list failed")
		return
	}
	now := time.Now()
	current := map[string]nsObs{}
	for _, ns := range m.w.nss {
		current[ns] = nsObs{owner: rec.owners[m.k.PartitionOf(ns)], rv: rec.version, since: now}
	}
	var stable []string
	m.mu.Lock()
	for _, ns := range m.w.nss {
		obs, ok := current[ns]
		if !ok {
			continue
		}
		if prev, ok := m.seen[ns]; ok && prev.rv == obs.rv {
			obs.since = prev.since
		}
		m.seen[ns] = obs
		if now.Sub(obs.since) >= 2*time.Second {
			stable = append(stable, ns)
		}
	}
	m.mu.Unlock()
	if len(stable) == 0 {
		m.count("skipped: the owner record changed lately")
		return
	}
	ns := stable[m.rng.IntN(len(stable))]
	obs := current[ns]
	m.mu.Lock()
	obs.since = m.seen[ns].since
	m.mu.Unlock()
	var others []string
	live := m.k.Live()
	for name := range live {
		if name != obs.owner {
			others = append(others, name)
		}
	}
	sort.Strings(others)
	if len(others) > 0 {
		as := others[m.rng.IntN(len(others))]
		err := framework.DryRunPodCreate(ctx, m.client(as), ns)
		switch {
		case ownerrecord.IsRefusal(err, m.fence.Name):
			m.count("non-owner refused by the fence")
		case err == nil && m.isFenceOff():
			m.count("non-owner accepted: the fence's binding is deleted (fault)")
		case err == nil:
			after, aerr := m.observe(ctx, ns)
			if aerr == nil && after.owner == as {
				m.count("non-owner accepted: its partition moved to it meanwhile")
				break
			}
			m.count("NON-OWNER ACCEPTED")
			m.mu.Lock()
			m.lateAccepted = append(m.lateAccepted, fmt.Sprintf("%s: a write of shard %s in %s was accepted; owner %q (record %s, unchanged since %s), after: %+v (%v)",
				time.Now().Format("15:04:05.000"), as, ns, obs.owner, obs.rv, obs.since.Format("15:04:05.000"), after, aerr))
			m.mu.Unlock()
		default:
			m.count("non-owner write failed otherwise")
		}
	}
	// And the owner itself, when it runs: allowed (a liveness check of the fence, reported).
	if obs.owner != "" && live[obs.owner] {
		err := framework.DryRunPodCreate(ctx, m.client(obs.owner), ns)
		switch {
		case err == nil:
			m.count("owner allowed")
		case ownerrecord.IsRefusal(err, m.fence.Name):
			m.count("owner refused by the fence")
			m.mu.Lock()
			m.ownerRefused = append(m.ownerRefused, fmt.Sprintf("%s: %s refused in %s, whose partition its owner Role grants (%v)", time.Now().Format("15:04:05.000"), obs.owner, ns, err))
			m.mu.Unlock()
		default:
			m.count("owner write failed otherwise")
		}
	}
}

func (m *monitor) observe(ctx context.Context, ns string) (nsObs, error) {
	rec, err := m.record(ctx)
	if err != nil {
		return nsObs{}, err
	}
	return nsObs{owner: rec.owners[m.k.PartitionOf(ns)], rv: rec.version, since: time.Now()}, nil
}

// ownerRecord is the fence's owner record as listed: partition → shard, and a version
// that changes with any change of a record Role or RoleBinding.
type ownerRecord struct {
	owners  map[string]string
	version string
}

// record lists the owner Roles and RoleBindings of the fence's namespace.
func (m *monitor) record(ctx context.Context) (ownerRecord, error) {
	opts := metav1.ListOptions{LabelSelector: ownerrecord.RecordLabel}
	roles, err := m.f.Client.RbacV1().Roles(m.fence.Namespace).List(ctx, opts)
	if err != nil {
		return ownerRecord{}, err
	}
	bindings, err := m.f.Client.RbacV1().RoleBindings(m.fence.Namespace).List(ctx, opts)
	if err != nil {
		return ownerRecord{}, err
	}
	rec := ownerRecord{owners: map[string]string{}}
	var versions []string
	for _, r := range roles.Items {
		versions = append(versions, "role/"+r.Name+"@"+r.ResourceVersion)
		shard, ok := strings.CutPrefix(r.Name, ownerrecord.OwnerRolePrefix)
		if !ok {
			continue
		}
		for _, rule := range r.Rules {
			for _, p := range rule.ResourceNames {
				rec.owners[p] = shard
			}
		}
	}
	for _, b := range bindings.Items {
		versions = append(versions, "binding/"+b.Name+"@"+b.ResourceVersion)
	}
	sort.Strings(versions)
	rec.version = strings.Join(versions, ",")
	return rec, nil
}

func (m *monitor) client(shard string) kubernetes.Interface {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[shard]; ok {
		return c
	}
	cfg := m.k.ShardRESTConfig(shard) // the shard's identity exists: it was started
	cfg.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	m.clients[shard] = c
	return c
}

func (m *monitor) count(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probes[what]++
}

// sampleDenials reads the API server's count of the fence's denials; a count lower than
// the last one means the API server restarted, and the last one is kept as a base.
func (m *monitor) sampleDenials() {
	m.mu.Lock()
	paused := m.denialPaused
	m.mu.Unlock()
	if paused {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := m.f.FenceDenials(ctx, m.fence.Name)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.denialPaused {
		return
	}
	if v < m.denialLast {
		m.denialBase += m.denialLast
	}
	m.denialLast = v
}

// setFenceOff records whether the fence's binding is deleted (see monitor.fenceOff).
func (m *monitor) setFenceOff(off bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fenceOff = off
}

func (m *monitor) isFenceOff() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenceOff
}

// pauseDenials is called before the API server is killed: the last sample is kept as a
// base and sampling stops until resumeDenials (after the restart, the count starts at 0).
func (m *monitor) pauseDenials() {
	m.sampleDenials()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.denialPaused = true
	m.denialBase += m.denialLast
	m.denialLast = 0
}

func (m *monitor) resumeDenials() {
	m.mu.Lock()
	m.denialPaused = false
	m.mu.Unlock()
	m.sampleDenials()
}

func (m *monitor) denials() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.denialBase + m.denialLast
}
