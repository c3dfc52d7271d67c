// Package audit reads the reconcile audit logs written by kshard's test-only audit
// controller (one JSON line per reconcile: shard, namespace, start, end) and checks the
// sharding invariants against them: no two shards reconciled one namespace at overlapping
// times, and every namespace is reconciled by a live shard again within a bound.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
)

// Record is one reconcile. Start and End are wall-clock Unix nanoseconds; all processes
// of a test run on one host.
type Record = audit.Record

// Overlap is a violation: two shards working one namespace at the same time.
type Overlap struct {
	Namespace string
	A, B      Record
}

func (o Overlap) String() string {
	return fmt.Sprintf("namespace %s: shard %s [%s, %s] overlaps shard %s [%s, %s]", o.Namespace,
		o.A.Shard, ts(o.A.Start), ts(o.A.End), o.B.Shard, ts(o.B.Start), ts(o.B.End))
}

func ts(n int64) string { return time.Unix(0, n).UTC().Format("15:04:05.000000") }

// ReadDir reads every *.jsonl file in dir. A torn last line (a process killed mid-write)
// is skipped; any other bad line is an error.
func ReadDir(dir string) ([]Record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Record
	for _, f := range files {
		recs, err := readFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, recs...)
	}
	return all, nil
}

func readFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	var pendingErr error
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		if pendingErr != nil {
			return nil, pendingErr
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			pendingErr = fmt.Errorf("%s:%d: %w", path, line, err)
			continue
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// Overlaps returns every pair of reconciles of one namespace by two different shards whose
// intervals intersect.
func Overlaps(recs []Record) []Overlap {
	byNS := map[string][]Record{}
	for _, r := range recs {
		byNS[r.Namespace] = append(byNS[r.Namespace], r)
	}
	var out []Overlap
	for ns, rs := range byNS {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		// latest[shard] is the interval of that shard ending last so far.
		latest := map[string]Record{}
		for _, r := range rs {
			for shard, prev := range latest {
				if shard != r.Shard && prev.End > r.Start {
					out = append(out, Overlap{Namespace: ns, A: prev, B: r})
				}
			}
			if cur, ok := latest[r.Shard]; !ok || r.End > cur.End {
				latest[r.Shard] = r
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].B.Start < out[j].B.Start })
	return out
}

// Owners returns, for each namespace, the shard of its last reconcile that started in
// [from, to).
func Owners(recs []Record, from, to time.Time) map[string]string {
	last := map[string]Record{}
	for _, r := range recs {
		if r.Start < from.UnixNano() || r.Start >= to.UnixNano() {
			continue
		}
		if cur, ok := last[r.Namespace]; !ok || r.Start > cur.Start {
			last[r.Namespace] = r
		}
	}
	out := make(map[string]string, len(last))
	for ns, r := range last {
		out[ns] = r.Shard
	}
	return out
}

// FirstReconcileAfter returns, for each namespace, when a shard in live first started a
// reconcile of it at or after t. Namespaces missing from the result were not reconciled.
func FirstReconcileAfter(recs []Record, t time.Time, live map[string]bool) map[string]time.Time {
	out := map[string]time.Time{}
	for _, r := range recs {
		if r.Start < t.UnixNano() || !live[r.Shard] {
			continue
		}
		st := time.Unix(0, r.Start)
		if cur, ok := out[r.Namespace]; !ok || st.Before(cur) {
			out[r.Namespace] = st
		}
	}
	return out
}
