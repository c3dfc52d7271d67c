package shardrpc

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

const loadTestPartitions = 16

// loadCoordinator is a coordinator leader reduced to what load reports need: it welcomes
// every hello with its load settings, acknowledges every heartbeat after validating it as
// the real coordinator does (protocol.ReportFromWire), records which heartbeats carried a
// report, and ends each session after perSession heartbeats, so that the client opens the
// next one and is welcomed again.
type loadCoordinator struct {
	kshardv1.UnimplementedCoordinatorServer
	load       protocol.LoadSettings
	hb         time.Duration
	perSession int

	mu       sync.Mutex
	sessions [][]seenHeartbeat
	refused  []error
}

// seenHeartbeat is one heartbeat as the coordinator validated it.
type seenHeartbeat struct {
	seq  uint64
	load *protocol.LoadReport
}

func (f *loadCoordinator) Session(s grpc.BidiStreamingServer[kshardv1.ShardMessage, kshardv1.CoordinatorMessage]) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	in, err := protocol.ReportFromWire(m, "", loadTestPartitions)
	if err != nil || in.Report.Kind != handoff.ReportHello {
		return status.Errorf(codes.InvalidArgument, "want a hello: %v", err)
	}
	shard, sess := in.Report.Shard, in.Report.Session
	info := protocol.SessionInfo{PartitionCount: loadTestPartitions, Hasher: protocol.Hasher, LeaderTerm: 1}
	send := func(c handoff.Command) error {
		c.To, c.Session = shard, sess
		w, err := protocol.CommandToWire(c, info)
		if err != nil {
			return err
		}
		return s.Send(w)
	}
	if err := send(handoff.Command{Kind: handoff.CmdWelcome, TTL: 10 * time.Second, HeartbeatInterval: f.hb, Load: f.load}); err != nil {
		return err
	}
	f.mu.Lock()
	i := len(f.sessions)
	f.sessions = append(f.sessions, nil)
	f.mu.Unlock()
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		in, err := protocol.ReportFromWire(m, shard, loadTestPartitions)
		if err != nil {
			f.mu.Lock()
			f.refused = append(f.refused, err)
			f.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "%v", err)
		}
		if in.Report.Kind != handoff.ReportHeartbeat {
			continue
		}
		f.mu.Lock()
		f.sessions[i] = append(f.sessions[i], seenHeartbeat{seq: in.Report.Seq, load: in.Report.Load})
		n := len(f.sessions[i])
		f.mu.Unlock()
		if err := send(handoff.Command{Kind: handoff.CmdAck, Seq: in.Report.Seq}); err != nil {
			return err
		}
		if n == f.perSession {
			return status.Error(codes.Unavailable, "this test's sessions are short")
		}
	}
}

// completed returns the first n sessions once each has perSession heartbeats.
func (f *loadCoordinator) completed(n int) ([][]seenHeartbeat, []error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sessions) < n || len(f.refused) > 0 {
		return nil, slices.Clone(f.refused), len(f.refused) > 0
	}
	out := make([][]seenHeartbeat, n)
	for i := range n {
		if len(f.sessions[i]) < f.perSession {
			return nil, nil, false
		}
		out[i] = slices.Clone(f.sessions[i])
	}
	return out, nil, true
}

// fakeReporter returns a fixed report and records the settings it was given.
type fakeReporter struct {
	mu       sync.Mutex
	report   protocol.LoadReport
	calls    int
	settings []protocol.LoadSettings
}

func (r *fakeReporter) Load() protocol.LoadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	out := r.report
	out.Partitions = slices.Clone(r.report.Partitions) // the client may change what it gets
	return out
}

func (r *fakeReporter) SetLoadSettings(l protocol.LoadSettings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings = append(r.settings, l)
}

// TestLoadReportCadence runs a real client against a coordinator over gRPC, for two
// sessions each: a report goes on the first heartbeat after each Welcome and then on every
// heartbeat the Welcome's report interval apart, validated as the coordinator validates it;
// none goes without a reporter, while the interval is 0 (a coordinator that predates load
// reports), or when the reporter's snapshot is invalid, and the session goes on either way.
func TestLoadReportCadence(t *testing.T) {
	const hb = 20 * time.Millisecond
	settings := func(every int) protocol.LoadSettings {
		return protocol.LoadSettings{ReportInterval: time.Duration(every) * hb, HalfLife: time.Minute, ReconcileWeight: 0.1}
	}
	good := protocol.LoadReport{LimiterWaitPermille: 30, Partitions: []protocol.PartitionLoad{
		{Partition: 1, LoadMilli: 2500, Objects: 12, AgeSeconds: 40}, {Partition: 9, LoadMilli: 7, Objects: 1, AgeSeconds: 100_000}}}
	// What the coordinator receives of good: the age is capped, the rest as measured.
	sentGood := protocol.LoadReport{LimiterWaitPermille: 30, Partitions: []protocol.PartitionLoad{
		{Partition: 1, LoadMilli: 2500, Objects: 12, AgeSeconds: 40}, {Partition: 9, LoadMilli: 7, Objects: 1, AgeSeconds: protocol.MaxLoadAgeSeconds}}}
	unsorted := protocol.LoadReport{Partitions: []protocol.PartitionLoad{{Partition: 9}, {Partition: 1}}}
	outOfRange := protocol.LoadReport{Partitions: []protocol.PartitionLoad{{Partition: loadTestPartitions}}}
	tests := []struct {
		name     string
		settings protocol.LoadSettings
		reporter *fakeReporter // nil: Options.LoadReporter unset
		// wantSeqs are the heartbeats of each session that carry a report.
		wantSeqs    []uint64
		wantInvalid int // at least this many snapshots refused
	}{
		{name: "every third heartbeat, the first included", settings: settings(3), reporter: &fakeReporter{report: good}, wantSeqs: []uint64{1, 4, 7}},
		{name: "every heartbeat", settings: settings(1), reporter: &fakeReporter{report: good}, wantSeqs: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "an interval longer than a session", settings: settings(50), reporter: &fakeReporter{report: good}, wantSeqs: []uint64{1}},
		{name: "an empty report", settings: settings(4), reporter: &fakeReporter{}, wantSeqs: []uint64{1, 5}},
		{name: "interval 0: a coordinator that predates load reports", settings: protocol.LoadSettings{}, reporter: &fakeReporter{report: good}},
		{name: "no reporter", settings: settings(1)},
		{name: "an unsorted snapshot is not sent", settings: settings(2), reporter: &fakeReporter{report: unsorted}, wantInvalid: 8},
		{name: "a snapshot of a partition out of range is not sent", settings: settings(2), reporter: &fakeReporter{report: outOfRange}, wantInvalid: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const sessions, perSession = 2, 8
			f := &loadCoordinator{load: tc.settings, hb: hb, perSession: perSession}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			kshardv1.RegisterCoordinatorServer(srv, f)
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(srv.Stop)

			metrics, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{ShardID: "s-1", Incarnation: 1, Addresses: []string{l.Addr().String()},
				Credentials: insecure.NewCredentials(), PartitionCount: loadTestPartitions,
				MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Metrics: metrics}
			if tc.reporter != nil {
				opts.LoadReporter = tc.reporter
			}
			c, err := New(opts, nopHandler{}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = c.Run(ctx) }()

			var got [][]seenHeartbeat
			deadline := time.Now().Add(20 * time.Second)
			for {
				s, refused, ok := f.completed(sessions)
				if len(refused) > 0 {
					t.Fatalf("the coordinator refused what the client sent: %v", refused)
				}
				if ok {
					got = s
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d sessions of %d heartbeats not seen within 20s", sessions, perSession)
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done

			wantReport := &sentGood
			if tc.reporter != nil && len(tc.reporter.report.Partitions) == 0 {
				wantReport = &protocol.LoadReport{}
			}
			for i, hbs := range got {
				var seqs []uint64
				for j, h := range hbs {
					if h.seq != uint64(j+1) {
						t.Fatalf("session %d: heartbeat %d has seq %d", i+1, j+1, h.seq)
					}
					if h.load == nil {
						continue
					}
					seqs = append(seqs, h.seq)
					if !equalLoad(h.load, wantReport) {
						t.Errorf("session %d, heartbeat %d: report %+v, want %+v", i+1, h.seq, *h.load, *wantReport)
					}
				}
				if !slices.Equal(seqs, tc.wantSeqs) {
					t.Errorf("session %d: reports on heartbeats %v, want %v", i+1, seqs, tc.wantSeqs)
				}
			}
			sent := testutil.ToFloat64(metrics.LoadReports.WithLabelValues("sent"))
			invalid := testutil.ToFloat64(metrics.LoadReports.WithLabelValues("invalid"))
			if want := float64(sessions * len(tc.wantSeqs)); sent < want {
				t.Errorf("load reports sent = %v, want at least %v", sent, want)
			}
			if invalid < float64(tc.wantInvalid) || (tc.wantInvalid == 0 && invalid != 0) {
				t.Errorf("invalid load reports = %v, want at least %d", invalid, tc.wantInvalid)
			}
			if tc.reporter == nil {
				return
			}
			tc.reporter.mu.Lock()
			defer tc.reporter.mu.Unlock()
			if len(tc.reporter.settings) < sessions {
				t.Errorf("the reporter was given settings %d times, want once per Welcome (%d)", len(tc.reporter.settings), sessions)
			}
			for _, s := range tc.reporter.settings {
				if s != tc.settings {
					t.Errorf("the reporter was given %+v, want the Welcome's %+v", s, tc.settings)
				}
			}
			if tc.settings.ReportInterval == 0 && tc.reporter.calls != 0 {
				t.Errorf("Load was called %d times while the coordinator wants no reports", tc.reporter.calls)
			}
		})
	}
}

// equalLoad compares two reports, an empty list and none being the same.
func equalLoad(a, b *protocol.LoadReport) bool {
	return a.LimiterWaitPermille == b.LimiterWaitPermille && slices.Equal(a.Partitions, b.Partitions)
}

// TestLoadReportSeq: which heartbeats carry a report, by sequence number within the
// session, for the report interval in heartbeats the Welcome gives (rounded to the
// nearest whole heartbeat), without any network.
func TestLoadReportSeq(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		hb       time.Duration
		reporter bool
		want     []uint64      // of seqs 1..12
		cadence  time.Duration // the report interval the reporter is given: the rounded one
	}{
		{name: "every 10th at the defaults", interval: 10 * time.Second, hb: time.Second, reporter: true, want: []uint64{1, 11}, cadence: 10 * time.Second},
		{name: "every heartbeat", interval: time.Second, hb: time.Second, reporter: true, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, cadence: time.Second},
		{name: "an interval below the heartbeat's", interval: time.Second, hb: 3 * time.Second, reporter: true, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, cadence: 3 * time.Second},
		{name: "rounded up", interval: 2500 * time.Millisecond, hb: time.Second, reporter: true, want: []uint64{1, 4, 7, 10}, cadence: 3 * time.Second},
		{name: "rounded down", interval: 2400 * time.Millisecond, hb: time.Second, reporter: true, want: []uint64{1, 3, 5, 7, 9, 11}, cadence: 2 * time.Second},
		{name: "interval 0", interval: 0, hb: time.Second, reporter: true},
		{name: "no reporter", interval: time.Second, hb: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{opts: Options{PartitionCount: loadTestPartitions}, log: logr.Discard()}
			if tc.reporter {
				c.opts.LoadReporter = &fakeReporter{report: protocol.LoadReport{Partitions: []protocol.PartitionLoad{{Partition: partition.ID(3)}}}}
			}
			c.welcomeLoad(protocol.LoadSettings{ReportInterval: tc.interval, HalfLife: time.Minute}, tc.hb)
			var got []uint64
			for seq := uint64(1); seq <= 12; seq++ {
				if r := c.loadReport(seq); r != nil {
					got = append(got, seq)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("reports on %v, want %v", got, tc.want)
			}
			if r := c.loadReport(0); r != nil {
				t.Error("the hello (seq 0) got a report")
			}
			if fr, ok := c.opts.LoadReporter.(*fakeReporter); ok && tc.interval > 0 {
				if len(fr.settings) != 1 || fr.settings[0].ReportInterval != tc.cadence {
					t.Errorf("the reporter was given %+v, want the report interval %s", fr.settings, tc.cadence)
				}
			}
		})
	}
}
