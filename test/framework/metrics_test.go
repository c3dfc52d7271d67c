package framework

import "testing"

func TestParseMetricsValue(t *testing.T) {
	page := `# HELP x help
# TYPE x counter
kshard_moves_total 3
kshard_cached{resource="configmaps",shard="s-1"} 10
kshard_cached{resource="pods",shard="s-1"} 5
kshard_cached{resource="configmaps",shard="s-2"} 7
h_bucket{le="+Inf"} 2
`
	m := ParseMetrics(page)
	tests := []struct {
		name  string
		query string
		match []string
		want  float64
	}{
		{name: "no labels", query: "kshard_moves_total", want: 3},
		{name: "sum over series", query: "kshard_cached", want: 22},
		{name: "one label", query: "kshard_cached", match: []string{`resource="configmaps"`}, want: 17},
		{name: "two labels", query: "kshard_cached", match: []string{`resource="configmaps"`, `shard="s-2"`}, want: 7},
		{name: "prefix is not a match", query: "kshard_moves", want: 0},
		{name: "infinite bucket label", query: "h_bucket", match: []string{`le="+Inf"`}, want: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Value(tc.query, tc.match...); got != tc.want {
				t.Errorf("Value(%q, %v) = %v, want %v", tc.query, tc.match, got, tc.want)
			}
		})
	}
}
