package invariant

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

const sa = "system:serviceaccount:kshard:shard"

func at(s int) time.Time { return time.Date(2026, 11, 30, 15, 0, s, 0, time.UTC) }

func TestParseAudit(t *testing.T) {
	log := `{"kind":"Event","level":"Metadata","auditID":"a1","stage":"ResponseComplete","verb":"update","user":{"username":"` + sa + `","extra":{"authentication.kubernetes.io/pod-name":["shard-1"]}},"objectRef":{"resource":"endpointslices","namespace":"ns1","name":"svc-abc","apiGroup":"discovery.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-30T15:00:01.000001Z"}
{"kind":"Event","level":"Metadata","auditID":"a2","stage":"ResponseComplete","verb":"create","user":{"username":"` + sa + `","extra":{"authentication.kubernetes.io/pod-name":["shard-2"]}},"objectRef":{"resource":"endpointslices","namespace":"ns1","apiGroup":"discovery.k8s.io"},"responseStatus":{"code":403},"requestReceivedTimestamp":"2026-11-30T15:00:02Z"}
{"kind":"Event","level":"Metadata","auditID":"a3","stage":"ResponseComplete","verb":"update","user":{"username":"admin"},"objectRef":{"resource":"endpointslices","namespace":"other","name":"x","apiGroup":"discovery.k8s.io"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-30T15:00:03Z"}
{"kind":"Event","level":"Metadata","auditID":"a4","stage":"ResponseComplete","verb":"update","user":{"username":"admin"},"objectRef":{"resource":"endpoints","namespace":"ns1","name":"x","apiGroup":""},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-30T15:00:03Z"}
{"kind":"Event","level":"Met`
	ws, err := ParseAudit(strings.NewReader(log), func(ns string) bool { return ns == "ns1" })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"update endpointslices ns1/svc-abc by shard-1 at 15:00:01.000001: 200 (audit a1)",
		"create endpointslices ns1/(generateName) by shard-2 at 15:00:02.000000: 403 (audit a2)",
	}
	if len(ws) != len(want) {
		t.Fatalf("writes %v, want %d", ws, len(want))
	}
	for i, w := range ws {
		if w.String() != want[i] {
			t.Errorf("write %d: %s, want %s", i, w, want[i])
		}
	}
	if _, err := ParseAudit(strings.NewReader("nope\n{}\n"), nil); err == nil {
		t.Error("a bad line before the last: no error")
	}
}

func TestParseOwnership(t *testing.T) {
	line := func(s int, shard, msg string, p int) string {
		return `{"level":"info","ts":"` + at(s).Format(time.RFC3339Nano) + `","msg":"` + msg + `","shard":"` + shard + `","partition":` + strconv.Itoa(p) + `}`
	}
	tests := []struct {
		name        string
		shards      map[string][]string
		coordinator []string
		kills       map[string][]time.Time
		want        []string
	}{
		{
			name: "worked, released by the coordinator, taken by another; one still open",
			shards: map[string][]string{
				"shard-1": {line(1, "shard-1", MsgWorking, 1), line(2, "shard-1", MsgWorking, 2), "not json", line(4, "shard-1", "releasing partition: draining in-flight work", 1)},
				"shard-2": {line(6, "shard-2", MsgWorking, 1)},
			},
			coordinator: []string{line(5, "shard-1", MsgReleased, 1), line(5, "shard-1", "partition acquired", 9)},
			want: []string{"shard-1 partition 1 [15:00:01.000000, 15:00:05.000000]", "shard-1 partition 2 [15:00:02.000000, open]",
				"shard-2 partition 1 [15:00:06.000000, open]"},
		},
		{
			name:   "killed, restarted, working it again",
			shards: map[string][]string{"shard-2": {line(1, "shard-2", MsgWorking, 1), line(8, "shard-2", MsgWorking, 1)}},
			kills:  map[string][]time.Time{"shard-2": {at(4)}},
			want:   []string{"shard-2 partition 1 [15:00:01.000000, 15:00:04.000000 (killed)]", "shard-2 partition 1 [15:00:08.000000, open]"},
		},
		{
			name:        "a release of another shard or partition does not end it",
			shards:      map[string][]string{"shard-2": {line(1, "shard-2", MsgWorking, 3)}},
			coordinator: []string{line(2, "shard-1", MsgReleased, 3), line(2, "shard-2", MsgReleased, 4)},
			want:        []string{"shard-2 partition 3 [15:00:01.000000, open]"},
		},
		{
			name:   "worked twice with nothing between: unclosed",
			shards: map[string][]string{"shard-2": {line(1, "shard-2", MsgWorking, 1), line(2, "shard-2", MsgWorking, 1)}},
			want:   []string{"shard-2 partition 1 [15:00:01.000000, 15:00:02.000000 (unclosed)]", "shard-2 partition 1 [15:00:02.000000, open]"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shards := map[string]io.Reader{}
			for s, l := range tc.shards {
				shards[s] = strings.NewReader(strings.Join(l, "\n"))
			}
			ivs, err := ParseOwnership(shards, []io.Reader{strings.NewReader(strings.Join(tc.coordinator, "\n"))}, tc.kills)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, iv := range ivs {
				got = append(got, iv.String())
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("intervals %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckWrites(t *testing.T) {
	w := func(s int, shard, name string, code int) Write {
		return Write{Verb: "update", Namespace: "ns", Name: name, User: sa, Pod: shard, Code: code, Received: at(s)}
	}
	iv := func(shard string, from, to int) Interval {
		i := Interval{Shard: shard, Partition: 7, Start: at(from)}
		if to > 0 {
			i.End = at(to)
		}
		return i
	}
	handoff := []Interval{iv("shard-1", 0, 10), iv("shard-2", 11, 0)}
	tests := []struct {
		name      string
		writes    []Write
		intervals []Interval
		want      []string // parts of each violation's text
		handovers int
		refused   int
	}{
		{
			name:      "one slice written across a handoff",
			writes:    []Write{w(1, "shard-1", "s", 200), w(12, "shard-2", "s", 200), w(13, "shard-2", "s", 200)},
			intervals: handoff, handovers: 1,
		},
		{
			name:      "a write outside its shard's interval",
			writes:    []Write{w(1, "shard-1", "s", 200), w(10, "shard-2", "s", 200)},
			intervals: handoff,
			want:      []string{"received while shard-2 did not work partition 7"},
		},
		{
			name:      "two shards' intervals overlap over one slice",
			writes:    []Write{w(5, "shard-1", "s", 200), w(6, "shard-2", "s", 200)},
			intervals: []Interval{iv("shard-1", 0, 10), iv("shard-2", 3, 0)},
			want:      []string{"had not ended before"}, handovers: 1,
		},
		{
			name:      "refused writes are counted, not checked",
			writes:    []Write{w(12, "shard-1", "s", 403)},
			intervals: handoff, refused: 1,
		},
		{
			name:      "a write by someone else",
			writes:    []Write{{Verb: "delete", Namespace: "ns", Name: "s", User: "admin", Code: 200, Received: at(1)}},
			intervals: handoff,
			want:      []string{"user other than a shard"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, rep := CheckWrites(tc.writes, sa, tc.intervals, func(string) uint32 { return 7 })
			if len(vs) != len(tc.want) {
				t.Fatalf("violations %v, want %d", vs, len(tc.want))
			}
			for i, v := range vs {
				if !strings.Contains(v.String(), tc.want[i]) {
					t.Errorf("violation %q, want it to say %q", v, tc.want[i])
				}
			}
			if rep.Handovers != tc.handovers {
				t.Errorf("handovers %d, want %d", rep.Handovers, tc.handovers)
			}
			if rep.Refused[403] != tc.refused {
				t.Errorf("refused %v, want %d", rep.Refused, tc.refused)
			}
		})
	}
}
