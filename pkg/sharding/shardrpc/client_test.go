package shardrpc

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

func TestTargetsExpandNames(t *testing.T) {
	lookups := map[string]int{}
	q := &targetQueue{
		addrs: []string{"coord-peers.ns.svc:9090", "10.0.0.9:9090", "unknown.ns.svc:9090", "again.ns.svc:9090"},
		lookup: func(_ context.Context, host string) ([]string, error) {
			lookups[host]++
			switch host {
			case "coord-peers.ns.svc":
				return []string{"10.0.0.1", "10.0.0.2", "fd00::3"}, nil
			case "again.ns.svc": // resolves to an address already listed
				return []string{"10.0.0.2"}, nil
			}
			return nil, errors.New("no such host")
		},
		timeout: time.Second, log: logr.Discard(),
	}
	want := []target{
		{addr: "10.0.0.1:9090", authority: "coord-peers.ns.svc:9090"},
		{addr: "10.0.0.2:9090", authority: "coord-peers.ns.svc:9090"},
		{addr: "[fd00::3]:9090", authority: "coord-peers.ns.svc:9090"},
		{addr: "10.0.0.9:9090"},
		{addr: "unknown.ns.svc:9090"},
	}
	var got []target
	for range want {
		got = append(got, q.next(context.Background(), nil))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("one pass = %v, want %v", got, want)
	}
	if lookups["coord-peers.ns.svc"] != 1 {
		t.Fatalf("names looked up %v within one pass, want once each", lookups)
	}
	// The next pass resolves again.
	if tg := q.next(context.Background(), nil); tg != want[0] || lookups["coord-peers.ns.svc"] != 2 {
		t.Fatalf("second pass starts with %v after %v lookups; want %v after a second lookup", tg, lookups, want[0])
	}
}

// TestTargetsLeaderAddress: the address the election Lease holder advertises ends each
// pass, after the configured addresses and without repeating one of them; a Lease that
// cannot be read or holds no usable address adds nothing new; the Lease is read at most
// once per leaderReadInterval.
func TestTargetsLeaderAddress(t *testing.T) {
	noDNS := func(context.Context, string) ([]string, error) { return nil, errors.New("no such host") }
	tests := []struct {
		name   string
		lookup func(context.Context, string) ([]string, error)
		leader func(context.Context) (string, error)
		want   []target
	}{
		{name: "no slices: the Lease holder after the name", lookup: noDNS,
			leader: func(context.Context) (string, error) { return "10.0.0.7:9090", nil },
			want:   []target{{addr: "coord-peers.ns.svc:9090"}, {addr: "10.0.0.7:9090"}}},
		{name: "the holder among the resolved addresses is not repeated",
			lookup: func(context.Context, string) ([]string, error) { return []string{"10.0.0.7"}, nil },
			leader: func(context.Context) (string, error) { return "10.0.0.7:9090", nil },
			want:   []target{{addr: "10.0.0.7:9090", authority: "coord-peers.ns.svc:9090"}}},
		{name: "a Lease that cannot be read", lookup: noDNS,
			leader: func(context.Context) (string, error) { return "", errors.New("forbidden") },
			want:   []target{{addr: "coord-peers.ns.svc:9090"}}},
		{name: "no holder", lookup: noDNS,
			leader: func(context.Context) (string, error) { return "", nil },
			want:   []target{{addr: "coord-peers.ns.svc:9090"}}},
		{name: "a holder address without a port", lookup: noDNS,
			leader: func(context.Context) (string, error) { return "10.0.0.7", nil },
			want:   []target{{addr: "coord-peers.ns.svc:9090"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			q := &targetQueue{addrs: []string{"coord-peers.ns.svc:9090"}, lookup: tc.lookup,
				leader:  func(ctx context.Context) (string, error) { reads++; return tc.leader(ctx) },
				timeout: time.Second, log: logr.Discard()}
			for pass := range 2 {
				if got := q.resolve(context.Background()); !slices.Equal(got, tc.want) {
					t.Fatalf("pass %d = %v, want %v", pass, got, tc.want)
				}
			}
			if reads != 1 {
				t.Errorf("the Lease was read %d times in two passes within %s, want once", reads, leaderReadInterval)
			}
		})
	}
}

// TestTargetsNewLeaderFirst: in the middle of a pass through the old pods' addresses (the
// peers Service's slices during a full outage), a leader the Lease newly names is dialed
// next rather than after the rest of the pass; the Lease is still read at most every
// leaderReadInterval, and an unchanged or passed-over leader leaves the pass as it was.
func TestTargetsNewLeaderFirst(t *testing.T) {
	old := []target{
		{addr: "10.0.0.1:9090", authority: "coord-peers.ns.svc:9090"},
		{addr: "10.0.0.2:9090", authority: "coord-peers.ns.svc:9090"},
		{addr: "10.0.0.3:9090", authority: "coord-peers.ns.svc:9090"},
	}
	const newLeader = "10.0.1.9:9090"
	tests := []struct {
		name  string
		after time.Duration // from the pass's start to the second dial
		lease string        // what the Lease names by then
		skip  string        // an address the second dial passes over
		want  []target      // the second dial and those after it
		reads int           // Lease reads in all
	}{
		{name: "a new leader goes first, then the rest of the pass", after: leaderReadInterval, lease: newLeader,
			want: []target{{addr: newLeader}, old[1], old[2]}, reads: 2},
		{name: "not read again within the interval", after: leaderReadInterval - time.Second, lease: newLeader,
			want: []target{old[1], old[2]}, reads: 1},
		{name: "the same leader", after: leaderReadInterval, lease: old[0].addr,
			want: []target{old[1], old[2]}, reads: 2},
		{name: "a leader in backoff is passed over", after: leaderReadInterval, lease: newLeader, skip: newLeader,
			want: []target{old[1], old[2]}, reads: 2},
		{name: "a new leader among the pass is not dialed twice", after: leaderReadInterval, lease: old[2].addr,
			want: []target{{addr: old[2].addr}, old[1]}, reads: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			lease, reads := old[0].addr, 0
			q := &targetQueue{addrs: []string{"coord-peers.ns.svc:9090"},
				lookup: func(context.Context, string) ([]string, error) {
					return []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, nil
				},
				leader: func(context.Context) (string, error) { reads++; return lease, nil },
				now:    func() time.Time { return now }, timeout: time.Second, log: logr.Discard()}
			ctx := context.Background()
			if got := q.next(ctx, nil); got != old[0] {
				t.Fatalf("first dial %v, want %v", got, old[0])
			}
			now, lease = now.Add(tc.after), tc.lease
			skip := func(a string) bool { return a == tc.skip }
			var got []target
			for range tc.want {
				got = append(got, q.next(ctx, skip))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("dials after %s: %v, want %v", tc.after, got, tc.want)
			}
			if reads != tc.reads {
				t.Errorf("the Lease was read %d times, want %d", reads, tc.reads)
			}
		})
	}
}

// TestRunReachesLeaderByLease: the configured name resolves to nothing (no EndpointSlice
// holds the new coordinators yet) and the shard still opens a session, with the leader
// the election Lease names.
func TestRunReachesLeaderByLease(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	leader := serveFollower(t, addr, "")
	c, err := New(Options{
		ShardID: "s-1", Incarnation: 1, Addresses: []string{"coordinator-peers.test:9090"},
		Credentials: insecure.NewCredentials(), PartitionCount: 16,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		ConnectTimeout: 200 * time.Millisecond,
		LookupHost:     func(context.Context, string) ([]string, error) { return nil, errors.New("no such host") },
		LeaderAddress:  func(context.Context) (string, error) { return addr, nil },
	}, nopHandler{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for leader.count() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no session reached the Lease holder's address within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewRefusesAddressWithoutPort(t *testing.T) {
	_, err := New(Options{ShardID: "s-1", Incarnation: 1, Addresses: []string{"coordinator.ns.svc"},
		Credentials: insecure.NewCredentials(), PartitionCount: 16}, nopHandler{}, logr.Discard())
	if err == nil {
		t.Fatal("an address without a port was accepted")
	}
}

// TestNewChecksGroup: the shard group a client names in its hellos is empty (the default
// group) or a DNS-1123 label, checked before the first session.
func TestNewChecksGroup(t *testing.T) {
	tests := []struct {
		name    string
		group   string
		wantErr bool
	}{
		{name: "default group", group: ""},
		{name: "a label", group: "hot"},
		{name: "upper case", group: "Hot", wantErr: true},
		{name: "a subdomain", group: "hot.pool", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{ShardID: "s-1", Group: tc.group, Incarnation: 1, Addresses: []string{"coordinator:9090"},
				Credentials: insecure.NewCredentials(), PartitionCount: 16}, nopHandler{}, logr.Discard())
			if (err != nil) != tc.wantErr {
				t.Fatalf("New with group %q: %v, want error %v", tc.group, err, tc.wantErr)
			}
		})
	}
}

// follower is a coordinator replica that is not the leader: it refuses every session
// (without naming a leader) and counts them, with the authority each was dialed by.
type follower struct {
	kshardv1.UnimplementedCoordinatorServer
	leader      string // named in the refusal's trailer, if set
	mu          sync.Mutex
	sessions    int
	authorities []string
}

func (f *follower) Session(s grpc.BidiStreamingServer[kshardv1.ShardMessage, kshardv1.CoordinatorMessage]) error {
	md, _ := metadata.FromIncomingContext(s.Context())
	f.mu.Lock()
	f.sessions++
	f.authorities = append(f.authorities, md.Get(":authority")...)
	f.mu.Unlock()
	if f.leader != "" {
		s.SetTrailer(metadata.Pairs(protocol.LeaderMetadataKey, f.leader))
	}
	return status.Error(codes.FailedPrecondition, "not the leader")
}

func (f *follower) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.sessions }

func serveFollower(t *testing.T, addr, leader string) *follower {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	f := &follower{leader: leader}
	s := grpc.NewServer()
	kshardv1.RegisterCoordinatorServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return f
}

// frozen accepts TCP connections and never answers, as the kernel does for a stopped
// (SIGSTOP) process's listening socket. It counts the connections.
func frozen(t *testing.T, addr string) *atomic.Int32 {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	var n atomic.Int32
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return &n
}

// TestRunReachesEveryReplicaOfAName gives the client one host name that resolves to a
// frozen replica and a follower, and after the first pass to a second follower too (a
// replica that came up meanwhile): the client must not hang on the frozen one, and must
// find the new replica by resolving again.
func TestRunReachesEveryReplicaOfAName(t *testing.T) {
	// One port on three loopback addresses, as the replicas of a headless Service share
	// the gRPC port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	stuck := frozen(t, "127.0.0.1:"+port)
	a := serveFollower(t, "127.0.0.2:"+port, "")
	b := serveFollower(t, "127.0.0.3:"+port, "")

	var lookups atomic.Int32
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host != "coordinator-peers.test" {
			return nil, errors.New("no such host")
		}
		if lookups.Add(1) == 1 {
			return []string{"127.0.0.1", "127.0.0.2"}, nil
		}
		return []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, nil
	}
	const connectTimeout = 200 * time.Millisecond
	c, err := New(Options{
		ShardID: "s-1", Incarnation: 1, Addresses: []string{"coordinator-peers.test:" + port},
		Credentials: insecure.NewCredentials(), PartitionCount: 16,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		ConnectTimeout: connectTimeout, LookupHost: lookup,
	}, nopHandler{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for a.count() < 3 || b.count() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: follower A %d sessions, B %d, frozen %d connections, %d lookups", a.count(), b.count(), stuck.Load(), lookups.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	if stuck.Load() < 1 {
		t.Errorf("the frozen replica was never tried")
	}
	// Each pass costs the frozen replica's ConnectTimeout plus backoffs, not gRPC's 20s.
	if max := 6 * (connectTimeout + 100*time.Millisecond); took > max {
		t.Errorf("3 sessions on each follower took %s, want within %s", took, max)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, au := range a.authorities {
		if au != "coordinator-peers.test:"+port {
			t.Fatalf("a resolved address was dialed with authority %q, want the name", au)
		}
	}
}

// serverNamed are credentials with a server name of their own, as TLS credentials with
// --grpc-tls-server-name have (insecure underneath: the test is about the authority).
type serverNamed struct {
	credentials.TransportCredentials
	name string
}

func (s serverNamed) Info() credentials.ProtocolInfo {
	i := s.TransportCredentials.Info()
	//lint:ignore SA1019 as TLS credentials with a server name fill it, which grpc.NewClient checks
	i.ServerName = s.name
	return i
}

func (s serverNamed) Clone() credentials.TransportCredentials {
	return serverNamed{TransportCredentials: s.TransportCredentials.Clone(), name: s.name}
}

// TestRunNameWithServerNameOverride is the chart's setup: a host name that resolves to
// the replicas (the peers Service), dialed with credentials that verify another name (the
// coordinator Service's, on its certificate). gRPC refuses a ClientConn whose authority
// differs from the credentials' server name, so the shard never reached a coordinator.
func TestRunNameWithServerNameOverride(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	f := serveFollower(t, "127.0.0.2:"+port, "")
	lookup := func(context.Context, string) ([]string, error) { return []string{"127.0.0.2"}, nil }
	c, err := New(Options{
		ShardID: "s-1", Incarnation: 1, Addresses: []string{"coordinator-peers.test:" + port},
		Credentials: serverNamed{TransportCredentials: insecure.NewCredentials(), name: "coordinator.test"}, PartitionCount: 16,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ConnectTimeout: time.Second, LookupHost: lookup,
	}, nopHandler{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for f.count() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no session reached the replica in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunPassesOverUnreachableLeader is a failover: the old leader is frozen, and the
// follower names it as the leader (it still holds the Lease). The client must spend its
// retries on the follower, which is about to lead, not on the frozen address that costs
// ConnectTimeout each time.
func TestRunPassesOverUnreachableLeader(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	old := "127.0.0.1:" + port
	stuck := frozen(t, old)
	f := serveFollower(t, "127.0.0.2:"+port, old)
	c, err := New(Options{
		ShardID: "s-1", Incarnation: 1, Addresses: []string{old, "127.0.0.2:" + port},
		Credentials: insecure.NewCredentials(), PartitionCount: 16,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ConnectTimeout: 200 * time.Millisecond,
	}, nopHandler{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	time.Sleep(3 * time.Second)
	cancel()
	<-done
	// Following every hint and the rotation, the frozen address would take 2 of every 3
	// attempts and most of the time; passed over for 400ms, 800ms, then 1.6s after each
	// failure, it is tried about 5 times in 3s.
	n, m := int(stuck.Load()), f.count()
	t.Logf("in 3s: %d attempts on the frozen old leader, %d sessions refused by the follower", n, m)
	if n > 7 || m < 4*n {
		t.Errorf("in 3s: %d attempts on the frozen old leader, %d on the follower; want the follower tried far more often", n, m)
	}
}

type nopHandler struct{}

func (nopHandler) Warm(_ partition.ID, done func())  { done() }
func (nopHandler) Work(partition.ID, bool)           {}
func (nopHandler) Drain(_ partition.ID, done func()) { done() }
func (nopHandler) Stop(partition.ID)                 {}
func (nopHandler) Drop(partition.ID)                 {}
func (nopHandler) SetDeadline(time.Time)             {}
func (nopHandler) Stats() protocol.Stats             { return protocol.Stats{} }
