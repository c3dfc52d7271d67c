package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// lines parses the JSON lines written to buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestDeferredValues(t *testing.T) {
	tests := []struct {
		name    string
		log     func(l logr.Logger)
		want    map[string]any
		without []string
	}{
		{
			name: "values of WithValues come with the line's",
			log: func(l logr.Logger) {
				l.WithValues("controller", "job", "namespace", "ns").Info("synced", "name", "web")
			},
			want: map[string]any{"msg": "synced", "controller": "job", "namespace": "ns", "name": "web"},
		},
		{
			name: "siblings do not share their values",
			log: func(l logr.Logger) {
				parent := l.WithValues("shard", "s-1")
				a, b := parent.WithValues("partition", 1), parent.WithValues("namespace", "other")
				_ = b.WithValues("more", true)
				a.Info("acquired")
			},
			want:    map[string]any{"msg": "acquired", "shard": "s-1", "partition": float64(1)},
			without: []string{"namespace", "more"},
		},
		{
			name: "names and errors keep the values",
			log: func(l logr.Logger) {
				l.WithValues("controller", "gc").WithName("graph").Error(errors.New("boom"), "failed", "name", "x")
			},
			want: map[string]any{"msg": "failed", "logger": "graph", "controller": "gc", "name": "x", "err": "boom"},
		},
		{
			name: "the caller is the line's, not the wrapper's",
			log: func(l logr.Logger) {
				l.WithValues("k", "v").V(1).Info("verbose")
			},
			want: map[string]any{"msg": "verbose", "k": "v"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger, flush, err := New(Options{Format: "json", Verbosity: 1}, &buf)
			if err != nil {
				t.Fatal(err)
			}
			tc.log(logger)
			flush()
			got := lines(t, &buf)
			if len(got) != 1 {
				t.Fatalf("%d lines, want 1: %s", len(got), buf.String())
			}
			for k, v := range tc.want {
				if got[0][k] != v {
					t.Errorf("%s = %v, want %v (line %v)", k, got[0][k], v, got[0])
				}
			}
			for _, k := range tc.without {
				if _, ok := got[0][k]; ok {
					t.Errorf("line has %s: %v", k, got[0])
				}
			}
			if caller, _ := got[0]["caller"].(string); !strings.HasPrefix(caller, "logging/deferred_test.go:") {
				t.Errorf("caller %q, want this test file", caller)
			}
		})
	}
}

// TestWithValuesDoesNotEncode: deriving a logger does not encode anything (zapr's own
// WithValues cloned zap's encoder, some 20 allocations and kilobytes of buffers).
func TestWithValuesDoesNotEncode(t *testing.T) {
	logger, _, err := New(Options{Format: "json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = logger.WithValues("controller", "job", "namespace", "ns", "name", "web")
	})
	// The pairs' slice, the variadic arguments and the sink.
	if allocs > 3 {
		t.Errorf("WithValues made %.0f allocations, want at most 3", allocs)
	}
}
