package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "json", opts: Options{Format: "json"}},
		{name: "console verbose", opts: Options{Format: "console", Verbosity: 4}},
		{name: "unknown format", opts: Options{Format: "xml"}, wantErr: `--log-format="xml"`},
		{name: "negative verbosity", opts: Options{Format: "json", Verbosity: -1}, wantErr: "--v=-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestJSONAndKlogShareTheSink(t *testing.T) {
	var buf bytes.Buffer
	logger, flush, err := New(Options{Format: "json", Verbosity: 2}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.WithValues("shard", "s-1").Info("partition acquired", "partition", 7)
	logger.V(3).Info("too verbose, dropped")
	klog.InfoS("from client-go", "namespace", "ns-1")
	flush()

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (V(3) must be dropped): %s", len(lines), buf.String())
	}
	if lines[0]["msg"] != "partition acquired" || lines[0]["shard"] != "s-1" || lines[0]["partition"] != float64(7) {
		t.Errorf("first line %v", lines[0])
	}
	if lines[1]["msg"] != "from client-go" || lines[1]["namespace"] != "ns-1" {
		t.Errorf("klog line not routed: %v", lines[1])
	}
}
