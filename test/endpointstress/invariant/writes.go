package invariant

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// PodNameExtra is the key of user.extra in an audit event that names the pod a
// pod-bound ServiceAccount token was issued for: the shard, with pod identities.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

// Write is one EndpointSlice write request as the API server's audit log records it.
type Write struct {
	Verb      string
	Namespace string
	Name      string // empty for a create by generateName
	User      string
	Pod       string // the pod of the user's token (PodNameExtra), if any
	Code      int
	Received  time.Time // requestReceivedTimestamp
	AuditID   string
}

// Accepted reports whether the API server carried the write out.
func (w Write) Accepted() bool { return w.Code >= 200 && w.Code < 300 }

func (w Write) String() string {
	name := w.Name
	if name == "" {
		name = "(generateName)"
	}
	by := w.User
	if w.Pod != "" {
		by = w.Pod
	}
	return fmt.Sprintf("%s endpointslices %s/%s by %s at %s: %d (audit %s)", w.Verb, w.Namespace, name, by,
		w.Received.Format("15:04:05.000000"), w.Code, w.AuditID)
}

type auditEvent struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		APIGroup  string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// ParseAudit reads a JSON audit log (one event a line) and returns its ResponseComplete
// events of discovery.k8s.io endpointslices, in namespaces keep accepts (nil: all). A
// torn last line is skipped.
func ParseAudit(r io.Reader, keep func(namespace string) bool) ([]Write, error) {
	var out []Write
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	var pending error
	for line := 1; sc.Scan(); line++ {
		if pending != nil {
			return nil, pending
		}
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			pending = fmt.Errorf("audit log line %d: %w", line, err)
			continue
		}
		if e.Stage != "ResponseComplete" || e.ObjectRef == nil || e.ObjectRef.Resource != "endpointslices" ||
			e.ObjectRef.APIGroup != "discovery.k8s.io" || (keep != nil && !keep(e.ObjectRef.Namespace)) {
			continue
		}
		w := Write{Verb: e.Verb, Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name, User: e.User.Username,
			Received: e.RequestReceived, AuditID: e.AuditID}
		if p := e.User.Extra[PodNameExtra]; len(p) > 0 {
			w.Pod = p[0]
		}
		if e.ResponseStatus != nil {
			w.Code = e.ResponseStatus.Code
		}
		out = append(out, w)
	}
	return out, sc.Err()
}

// Interval is a time a shard worked a partition: from its log's "partition acquired:
// working it" to the coordinator's "partition released" of that shard and partition
// (logged once the shard has drained its in-flight work and let go), or to the shard's
// death (SIGKILL), or open (End zero).
type Interval struct {
	Shard      string
	Partition  uint32
	Start, End time.Time
	Killed     bool
	// Unclosed: the shard worked the partition again with no release or kill logged in
	// between; the interval ends at the next start.
	Unclosed bool
}

func (i Interval) contains(t time.Time) bool {
	return !t.Before(i.Start) && (i.End.IsZero() || !t.After(i.End))
}

func (i Interval) String() string {
	end := "open"
	if !i.End.IsZero() {
		end = i.End.Format("15:04:05.000000")
		if i.Killed {
			end += " (killed)"
		}
		if i.Unclosed {
			end += " (unclosed)"
		}
	}
	return fmt.Sprintf("%s partition %d [%s, %s]", i.Shard, i.Partition, i.Start.Format("15:04:05.000000"), end)
}

type logLine struct {
	TS        string  `json:"ts"`
	Msg       string  `json:"msg"`
	Shard     string  `json:"shard"`
	Partition *uint32 `json:"partition"`
}

// The log messages that open and close an ownership interval: the shard's
// (pkg/sharding/shardrpc) and the coordinator's (pkg/sharding/coordinatorrpc).
const (
	MsgWorking  = "partition acquired: working it"
	MsgReleased = "partition released"
)

type mark struct {
	shard string
	p     uint32
	ts    time.Time
}

// readMarks returns the log's lines with message msg (JSON lines; others skipped).
func readMarks(r io.Reader, msg string) ([]mark, error) {
	var out []mark
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue
		}
		var l logLine
		if json.Unmarshal(b, &l) != nil || l.Partition == nil || l.Msg != msg {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil {
			return nil, fmt.Errorf("log line ts %q: %w", l.TS, err)
		}
		out = append(out, mark{l.Shard, *l.Partition, ts})
	}
	return out, sc.Err()
}

// ParseOwnership reads the shards' JSON logs (by shard ID, every run of that ID appended)
// and the coordinators' and returns the ownership intervals. kills are the times the test
// SIGKILLed each shard.
func ParseOwnership(shardLogs map[string]io.Reader, coordinatorLogs []io.Reader, kills map[string][]time.Time) ([]Interval, error) {
	type sp struct {
		shard string
		p     uint32
	}
	starts := map[sp][]time.Time{}
	for shard, r := range shardLogs {
		ms, err := readMarks(r, MsgWorking)
		if err != nil {
			return nil, fmt.Errorf("%s log: %w", shard, err)
		}
		for _, m := range ms {
			starts[sp{shard, m.p}] = append(starts[sp{shard, m.p}], m.ts)
		}
	}
	releases := map[sp][]time.Time{}
	for _, r := range coordinatorLogs {
		ms, err := readMarks(r, MsgReleased)
		if err != nil {
			return nil, fmt.Errorf("coordinator log: %w", err)
		}
		for _, m := range ms {
			releases[sp{m.shard, m.p}] = append(releases[sp{m.shard, m.p}], m.ts)
		}
	}
	sortTimes := func(ts []time.Time) { sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) }) }
	var out []Interval
	for k, ss := range starts {
		sortTimes(ss)
		rs := releases[k]
		sortTimes(rs)
		ks := append([]time.Time(nil), kills[k.shard]...)
		sortTimes(ks)
		for i, s := range ss {
			iv := Interval{Shard: k.shard, Partition: k.p, Start: s}
			var next time.Time
			if i+1 < len(ss) {
				next = ss[i+1]
			}
			before := func(t time.Time) bool { return t.After(s) && (next.IsZero() || t.Before(next)) }
			for _, r := range rs {
				if before(r) {
					iv.End = r
					break
				}
			}
			for _, kt := range ks {
				if before(kt) && (iv.End.IsZero() || kt.Before(iv.End)) {
					iv.End, iv.Killed = kt, true
					break
				}
			}
			if iv.End.IsZero() && !next.IsZero() {
				iv.End, iv.Unclosed = next, true
			}
			out = append(out, iv)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Shard < out[j].Shard
	})
	return out, nil
}

// WriteViolation is an accepted write that the shards' ownership does not explain.
type WriteViolation struct {
	Write Write
	Why   string
}

func (v WriteViolation) String() string { return v.Write.String() + ": " + v.Why }

// WriteReport sums up the writes CheckWrites saw.
type WriteReport struct {
	Accepted, Refused map[int]int // by code: 2xx, and the others (403: the fence)
	ByShard           map[string]int
	// Handovers counts slices written by one shard and then another (each such pair).
	Handovers int
	// SlicesByShards counts the slices written by 1, 2, 3, … shards.
	SlicesByShards map[int]int
}

// CheckWrites checks the writes of shards (writes whose user is shardUser) against their
// ownership intervals: each accepted write was received inside an interval of its shard
// for partitionOf(namespace); of two consecutive accepted writes of one slice by two
// shards, the first one's interval ended before the second one's began. Accepted writes
// by any other user are violations too.
func CheckWrites(writes []Write, shardUser string, intervals []Interval, partitionOf func(ns string) uint32) ([]WriteViolation, WriteReport) {
	rep := WriteReport{Accepted: map[int]int{}, Refused: map[int]int{}, ByShard: map[string]int{}, SlicesByShards: map[int]int{}}
	by := map[string][]Interval{} // shard/partition
	for _, iv := range intervals {
		k := fmt.Sprintf("%s/%d", iv.Shard, iv.Partition)
		by[k] = append(by[k], iv)
	}
	var vs []WriteViolation
	type last struct {
		w  Write
		iv Interval
	}
	prev := map[string]last{}
	shards := map[string]map[string]bool{}
	ws := append([]Write(nil), writes...)
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Received.Before(ws[j].Received) })
	for _, w := range ws {
		if !w.Accepted() {
			rep.Refused[w.Code]++
			continue
		}
		rep.Accepted[w.Code]++
		if w.User != shardUser || w.Pod == "" {
			vs = append(vs, WriteViolation{w, "written by a user other than a shard's pod identity"})
			continue
		}
		rep.ByShard[w.Pod]++
		p := partitionOf(w.Namespace)
		var in *Interval
		for i, iv := range by[fmt.Sprintf("%s/%d", w.Pod, p)] {
			if iv.contains(w.Received) {
				in = &by[fmt.Sprintf("%s/%d", w.Pod, p)][i]
				break
			}
		}
		if in == nil {
			vs = append(vs, WriteViolation{w, fmt.Sprintf("received while %s did not work partition %d (its intervals: %v)",
				w.Pod, p, by[fmt.Sprintf("%s/%d", w.Pod, p)])})
			continue
		}
		if w.Name == "" {
			continue
		}
		key := w.Namespace + "/" + w.Name
		if shards[key] == nil {
			shards[key] = map[string]bool{}
		}
		shards[key][w.Pod] = true
		if l, ok := prev[key]; ok && l.w.Pod != w.Pod {
			rep.Handovers++
			if l.iv.End.IsZero() || !l.iv.End.Before(in.Start) {
				vs = append(vs, WriteViolation{w, fmt.Sprintf("the slice's previous write (%s) was in %s, which had not ended before %s",
					l.w, l.iv, *in)})
			}
		}
		prev[key] = last{w, *in}
	}
	for _, s := range shards {
		rep.SlicesByShards[len(s)]++
	}
	return vs, rep
}
