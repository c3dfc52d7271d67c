package app

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kshard/kshard/pkg/controllers"
)

var updateDocs = flag.Bool("update", false, "rewrite the controllers table of docs/controllers.md from the descriptors")

const (
	docsPath   = "../../../docs/controllers.md"
	tableBegin = "<!-- controllers table: generated from cmd/shard/app.Descriptors() by `go test ./cmd/shard/app -run TestDocsControllersTable -update` -->"
	tableEnd   = "<!-- end of controllers table -->"
)

// controllersTable renders the docs' table of the kube-controller-manager controllers a
// shard runs, from their descriptors.
func controllersTable(ds []controllers.Descriptor) string {
	var b strings.Builder
	b.WriteString("| controller (canonical name, alias) | on by default | workers | primary (queue keys) | also reads | permissions beyond list/watch |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, name := range upstreamControllers(ds) {
		var d controllers.Descriptor
		for _, x := range ds {
			if x.Name == name {
				d = x
			}
		}
		workers := fmt.Sprintf("`--%s` (default %d)", d.WorkersFlag, d.DefaultWorkers)
		if d.FixedWorkers > 0 {
			workers = fmt.Sprintf("%d (fixed, no flag)", d.FixedWorkers)
		}
		var perms []string
		for _, p := range d.Permissions {
			gr := p.Resource
			if p.Group != "" {
				gr = p.Group + "/" + p.Resource
			}
			perms = append(perms, fmt.Sprintf("%s: %s", gr, strings.Join(p.Verbs, ", ")))
		}
		reads := resourceList(d.Reads)
		if d.Served != nil {
			if len(d.Served.Permissions) > 0 {
				perms = append(perms, fmt.Sprintf("*/*: %s", strings.Join(d.Served.Permissions, ", ")))
			}
			reads = servedText(*d.Served, reads)
		}
		names := "`" + d.Name + "`"
		if n, ok := controllers.NamesOf(d.Name); ok && n.Alias != "" {
			names = fmt.Sprintf("`%s`, `%s`", n.Canonical, n.Alias)
		}
		fmt.Fprintf(&b, "| %s | %t | %s | %s | %s | %s |\n", names, d.OnByDefault, workers,
			resourceList(d.Primary), reads, strings.Join(perms, "; "))
	}
	return b.String()
}

// servedText describes a Served in the table's "also reads" column, after reads.
func servedText(s controllers.ServedResources, reads string) string {
	what := "every served resource"
	if s.NamespacedOnly {
		what = "every served namespaced resource"
	}
	what += " that supports " + strings.Join(s.Verbs, ", ")
	if len(s.Ignore) > 0 {
		var ig []string
		for _, gr := range s.Ignore {
			ig = append(ig, gr.String())
		}
		what += " (but " + strings.Join(ig, ", ") + ")"
	}
	if reads == "—" {
		return what
	}
	return reads + "; " + what
}

func resourceList(rs []controllers.Resource) string {
	if len(rs) == 0 {
		return "—"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}

// TestDocsControllersTable keeps docs/controllers.md's table equal to the descriptors, so
// adding a controller updates the docs with -update rather than by hand.
func TestDocsControllersTable(t *testing.T) {
	path := filepath.Clean(docsPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the generated table's markers %q … %q", path, tableBegin, tableEnd)
	}
	want := tableBegin + "\n" + controllersTable(Descriptors()) + tableEnd
	got := doc[i : j+len(tableEnd)]
	if got == want {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j+len(tableEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's controllers table is out of date; run\n  go test ./cmd/shard/app -run TestDocsControllersTable -update\nwant:\n%s\ngot:\n%s", path, want, got)
}
