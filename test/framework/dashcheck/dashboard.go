package dashcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kshard/kshard/test/framework"
)

// Dashboard is the part of Grafana's dashboard model the tests read.
type Dashboard struct {
	File          string `json:"-"`
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a dashboard variable (templating.list).
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Multi      bool            `json:"multi"`
}

// Panel is a panel or a row (whose Panels are set when it is collapsed).
type Panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	GridPos    *GridPos   `json:"gridPos"`
	Datasource Datasource `json:"datasource"`
	Targets    []Target   `json:"targets"`
	Panels     []Panel    `json:"panels"` // a collapsed row's panels
}

// GridPos is a panel's place on Grafana's 24-column grid.
type GridPos struct{ H, W, X, Y int }

// Datasource is a reference to a data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string     `json:"refId"`
	Expr       string     `json:"expr"`
	Instant    bool       `json:"instant"`
	Datasource Datasource `json:"datasource"`
}

// PromQL returns the variable's query: Grafana stores it either as a string or as an
// object whose "query" field holds it.
func (v Variable) PromQL() (string, error) {
	if len(v.Query) == 0 {
		return v.Definition, nil
	}
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %s: query is neither a string nor an object with a query: %v", v.Name, err)
	}
	return o.Query, nil
}

// Leaves returns every non-row panel, those inside collapsed rows included.
func (d *Dashboard) Leaves() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// Dir is the chart's dashboards folder.
func Dir() string {
	return filepath.Join(framework.RepoRoot(), "charts", "kshard", "dashboards")
}

// Load reads every *.json under the chart's dashboards folder.
func Load(t testing.TB) []*Dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no dashboards in %s", Dir())
	}
	sort.Strings(files)
	var out []*Dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := &Dashboard{File: filepath.Base(f)}
		if err := json.Unmarshal(b, d); err != nil {
			t.Fatalf("%s: not a JSON dashboard: %v", d.File, err)
		}
		out = append(out, d)
	}
	return out
}

var (
	// varRef finds $name, ${name} and ${name:format} references in a query.
	varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	// builtins are the variables Grafana itself fills in.
	builtins = map[string]bool{"__rate_interval": true, "__interval": true, "__interval_ms": true, "__range": true,
		"__range_s": true, "__range_ms": true}
	uidRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,40}$`)
)

// referencedVars returns the names of the variables a query references.
func referencedVars(expr string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if name == "" {
			name = m[2]
		}
		out = append(out, name)
	}
	return out
}

// Validate returns what makes d not a dashboard Grafana (and its sidecar) imports as meant.
func Validate(d *Dashboard) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !uidRE.MatchString(d.UID) {
		bad("uid %q: want 1-40 characters of [a-zA-Z0-9_-]", d.UID)
	}
	if strings.TrimSpace(d.Title) == "" {
		bad("empty title")
	}
	if d.SchemaVersion < 36 {
		bad("schemaVersion %d: want 36 or later (datasource references by uid)", d.SchemaVersion)
	}
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		if _, dup := vars[v.Name]; dup {
			bad("variable %q defined twice", v.Name)
		}
		vars[v.Name] = v
		switch v.Type {
		case "datasource":
			if q, _ := v.PromQL(); q != "prometheus" {
				bad("datasource variable %q: query %q, want prometheus", v.Name, q)
			}
		case "query":
			q, err := v.PromQL()
			if err != nil {
				bad("%v", err)
			} else if _, _, err := parseLabelValues(q); err != nil {
				bad("variable %q: %v", v.Name, err)
			}
		default:
			bad("variable %q: type %q not handled by this test", v.Name, v.Type)
		}
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" {
		bad("no datasource variable: the dashboard would be bound to one installation's data source")
	}
	ids := map[int]string{}
	var check func(ps []Panel, inRow bool)
	check = func(ps []Panel, inRow bool) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if p.ID <= 0 {
				bad("%s: id must be positive", where)
			} else if other, dup := ids[p.ID]; dup {
				bad("%s: id also used by %q", where, other)
			}
			ids[p.ID] = p.Title
			if strings.TrimSpace(p.Title) == "" {
				bad("%s: no title", where)
			}
			if p.GridPos == nil {
				bad("%s: no gridPos", where)
			} else if g := *p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				bad("%s: gridPos %+v outside the 24-column grid", where, g)
			}
			if p.Type == "row" {
				if inRow {
					bad("%s: row inside a row", where)
				}
				check(p.Panels, true)
				continue
			}
			if p.Type == "" {
				bad("%s: no type", where)
			}
			if p.Datasource.UID != "${datasource}" {
				bad("%s: datasource uid %q, want ${datasource}", where, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				bad("%s: no targets", where)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if refs[tg.RefID] || tg.RefID == "" {
					bad("%s: refId %q empty or repeated", where, tg.RefID)
				}
				refs[tg.RefID] = true
				if strings.TrimSpace(tg.Expr) == "" {
					bad("%s %s: empty expr", where, tg.RefID)
				}
				if tg.Datasource.UID != "" && tg.Datasource.UID != "${datasource}" {
					bad("%s %s: datasource uid %q, want ${datasource}", where, tg.RefID, tg.Datasource.UID)
				}
				for _, name := range referencedVars(tg.Expr) {
					if _, ok := vars[name]; !ok && !builtins[name] {
						bad("%s %s: references undefined variable $%s", where, tg.RefID, name)
					}
				}
			}
		}
	}
	check(d.Panels, false)
	return errs
}

// labelValuesRE matches Grafana's label_values(label) and label_values(selector, label).
var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(?:(.+?)\s*,\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// parseLabelValues splits a label_values query into its series selector (may be empty)
// and label name.
func parseLabelValues(q string) (selector, label string, err error) {
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", "", fmt.Errorf("query %q: want label_values([selector,] label)", q)
	}
	return m[1], m[2], nil
}
