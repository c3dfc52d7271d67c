package controllers

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Selection is the parsed form of --controllers, with kube-controller-manager's syntax:
// "*" enables every controller that is on by default, "foo" enables foo, "-foo" disables
// foo. A name's own entry wins over "*".
type Selection []string

// DefaultSelection enables everything that is on by default.
var DefaultSelection = Selection{"*"}

// Validate rejects names that are not in known, so a typo is a startup error rather than
// a controller that silently never runs.
func (s Selection) Validate(known []string) error {
	set := make(map[string]bool, len(known))
	for _, k := range known {
		set[k] = true
	}
	var bad []string
	for _, e := range s {
		name := strings.TrimPrefix(e, "-")
		if e == "*" {
			continue
		}
		if name == "" || !set[name] {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		sorted := append([]string(nil), known...)
		sort.Strings(sorted)
		return fmt.Errorf("--controllers: unknown controller(s) %q; known: %s (use \"*\" for all, \"-name\" to disable one)",
			bad, strings.Join(sorted, ", "))
	}
	return nil
}

// Enabled reports whether the controller named name runs.
func (s Selection) Enabled(name string, onByDefault bool) bool {
	star := false
	for _, e := range s {
		switch e {
		case "-" + name:
			return false
		case name:
			return true
		case "*":
			star = true
		}
	}
	return star && onByDefault
}

// AddFlags registers --controllers.
func (s *Selection) AddFlags(fs *pflag.FlagSet, known []string) {
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	fs.StringSliceVar((*[]string)(s), "controllers", *s, fmt.Sprintf(
		"controllers to run: '*' runs all on by default, 'foo' runs foo, '-foo' does not run foo. Known: %s",
		strings.Join(sorted, ", ")))
}
