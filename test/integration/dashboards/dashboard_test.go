package dashboards

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kshard/kshard/test/framework/dashcheck"
)

func TestDashboardsAreGrafanaDashboards(t *testing.T) {
	ds := dashcheck.Load(t)
	uids := map[string]string{}
	titles := map[string]string{}
	for _, d := range ds {
		t.Run(d.File, func(t *testing.T) {
			for _, e := range dashcheck.Validate(d) {
				t.Error(e)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q also used by %s", d.UID, other)
			}
			if other, dup := titles[d.Title]; dup {
				t.Errorf("title %q also used by %s", d.Title, other)
			}
			uids[d.UID], titles[d.Title] = d.File, d.File
			t.Logf("%s: %q, %d panels", d.File, d.Title, len(d.Leaves()))
		})
	}
}

// TestValidateCatchesBrokenDashboards shows the validation fails on what it looks for.
func TestValidateCatchesBrokenDashboards(t *testing.T) {
	good := func() *dashcheck.Dashboard {
		d := &dashcheck.Dashboard{UID: "kshard-x", Title: "x", SchemaVersion: 39}
		d.Templating.List = []dashcheck.Variable{
			{Name: "datasource", Type: "datasource", Query: json.RawMessage(`"prometheus"`)},
			{Name: "shard", Type: "query", Query: json.RawMessage(`{"query":"label_values(up, shard)"}`)},
		}
		d.Panels = []dashcheck.Panel{
			{ID: 1, Type: "row", Title: "r", GridPos: &dashcheck.GridPos{H: 1, W: 24}},
			{ID: 2, Type: "timeseries", Title: "p", GridPos: &dashcheck.GridPos{H: 8, W: 12, Y: 1}, Datasource: dashcheck.Datasource{UID: "${datasource}"},
				Targets: []dashcheck.Target{{RefID: "A", Expr: `rate(x{shard=~"$shard"}[$__rate_interval])`}}},
		}
		return d
	}
	tests := []struct {
		name   string
		mutate func(d *dashcheck.Dashboard)
		want   string
	}{
		{name: "valid", mutate: func(*dashcheck.Dashboard) {}, want: ""},
		{name: "no uid", mutate: func(d *dashcheck.Dashboard) { d.UID = "" }, want: "uid"},
		{name: "old schema", mutate: func(d *dashcheck.Dashboard) { d.SchemaVersion = 16 }, want: "schemaVersion"},
		{name: "duplicate id", mutate: func(d *dashcheck.Dashboard) { d.Panels[1].ID = 1 }, want: "also used"},
		{name: "no gridPos", mutate: func(d *dashcheck.Dashboard) { d.Panels[1].GridPos = nil }, want: "no gridPos"},
		{name: "too wide", mutate: func(d *dashcheck.Dashboard) { d.Panels[1].GridPos.X = 20 }, want: "24-column"},
		{name: "fixed datasource", mutate: func(d *dashcheck.Dashboard) { d.Panels[1].Datasource.UID = "P1809F7CD0C75ACF3" }, want: "datasource uid"},
		{name: "undefined variable", mutate: func(d *dashcheck.Dashboard) { d.Panels[1].Targets[0].Expr = `x{pod=~"$pod"}` }, want: "undefined variable $pod"},
		{name: "bad variable query", mutate: func(d *dashcheck.Dashboard) {
			d.Templating.List[1].Query = json.RawMessage(`"query_result(up)"`)
		}, want: "label_values"},
		{name: "no datasource variable", mutate: func(d *dashcheck.Dashboard) { d.Templating.List = d.Templating.List[1:] }, want: "no datasource variable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			tc.mutate(d)
			errs := strings.Join(dashcheck.Validate(d), "\n")
			if tc.want == "" && errs != "" {
				t.Fatalf("valid dashboard reported: %s", errs)
			}
			if !strings.Contains(errs, tc.want) {
				t.Fatalf("errors %q do not mention %q", errs, tc.want)
			}
		})
	}
}
