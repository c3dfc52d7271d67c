package controllers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Selection is the parsed form of --controllers, with kube-controller-manager's syntax:
// "*" enables every controller that is on by default, "foo" enables foo, "-foo" disables
// foo. A controller's own entry wins over "*", and its first entry over a later one. As in
// kube-controller-manager, a controller is named by its canonical name or its alias
// ("replicaset-controller" or "replicaset", see Names): both name the same controller.
type Selection []string

// DefaultSelection enables everything that is on by default.
var DefaultSelection = Selection{"*"}

// Validate rejects entries that name none of known (kshard's names of the controllers),
// so a typo is a startup error rather than a controller that silently never runs.
func (s Selection) Validate(known []string) error {
	var bad []string
	for _, e := range s {
		if e == "*" {
			continue
		}
		name := strings.TrimPrefix(e, "-")
		if name == "" || !slices.ContainsFunc(known, func(k string) bool { return SameController(name, k) }) {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("--controllers: unknown controller(s) %q%s; known, by kube-controller-manager's canonical name or alias: %s (use \"*\" for all, \"-name\" to disable one)",
			bad, notImplemented(bad), displayNames(known))
	}
	return nil
}

// Enabled reports whether the controller named name (kshard's name, or either of
// kube-controller-manager's) runs.
func (s Selection) Enabled(name string, onByDefault bool) bool {
	star := false
	for _, e := range s {
		if e == "*" {
			star = true
			continue
		}
		if off, ok := strings.CutPrefix(e, "-"); ok {
			if SameController(off, name) {
				return false
			}
			continue
		}
		if SameController(e, name) {
			return true
		}
	}
	return star && onByDefault
}

// AddFlags registers --controllers.
func (s *Selection) AddFlags(fs *pflag.FlagSet, known []string) {
	fs.StringSliceVar((*[]string)(s), "controllers", *s, fmt.Sprintf(
		"controllers to run: '*' runs all on by default, 'foo' runs foo, '-foo' does not run foo; a controller is named by kube-controller-manager's canonical name or its alias, as its --controllers takes either. Known: %s",
		displayNames(known)))
}
