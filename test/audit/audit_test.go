package audit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func rec(shard, ns string, start, end int64) Record {
	return Record{Shard: shard, Namespace: ns, Start: start, End: end}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		name string
		recs []Record
		want int
	}{
		{name: "one shard back to back", recs: []Record{rec("a", "n", 0, 10), rec("a", "n", 5, 20)}, want: 0},
		{name: "handoff without gap", recs: []Record{rec("a", "n", 0, 10), rec("b", "n", 10, 20)}, want: 0},
		{name: "two shards overlap", recs: []Record{rec("a", "n", 0, 10), rec("b", "n", 9, 20)}, want: 1},
		{name: "different namespaces", recs: []Record{rec("a", "n", 0, 10), rec("b", "m", 5, 20)}, want: 0},
		{name: "long earlier interval overlaps later one",
			recs: []Record{rec("a", "n", 0, 100), rec("a", "n", 10, 20), rec("b", "n", 50, 60)}, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Overlaps(tc.recs); len(got) != tc.want {
				t.Errorf("Overlaps() = %v, want %d", got, tc.want)
			}
		})
	}
}

func TestReadDirSkipsTornLastLine(t *testing.T) {
	dir := t.TempDir()
	good := `{"shard":"a","namespace":"n","start":1,"end":2}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(good+`{"shard":"a","nam`), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadDir(dir)
	if err != nil || len(recs) != 1 {
		t.Fatalf("ReadDir = %v, %v; want 1 record", recs, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.jsonl"), []byte(`garbage`+"\n"+good), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDir(dir); err == nil {
		t.Fatal("a bad line in the middle must be an error")
	}
}

func TestOwnersAndFirstReconcile(t *testing.T) {
	s := func(sec int64) int64 { return sec * int64(time.Second) }
	recs := []Record{rec("a", "n", s(1), s(2)), rec("b", "n", s(5), s(6)), rec("a", "m", s(3), s(4))}
	owners := Owners(recs, time.Unix(0, 0), time.Unix(10, 0))
	if owners["n"] != "b" || owners["m"] != "a" {
		t.Errorf("Owners = %v", owners)
	}
	first := FirstReconcileAfter(recs, time.Unix(2, 0), map[string]bool{"b": true})
	if _, ok := first["m"]; ok || !first["n"].Equal(time.Unix(5, 0)) {
		t.Errorf("FirstReconcileAfter = %v", first)
	}
}
