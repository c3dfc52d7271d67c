package chart

import (
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	shardapp "github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/pkg/controllers"
)

// PermissionsTablePath is the chart file that maps controllers to RBAC rules.
const PermissionsTablePath = "files/permissions.yaml"

// PermissionsTable renders the chart's files/permissions.yaml from the code: the shard's
// base permissions and, per registered controller, whether "*" enables it and its rules.
// The chart's templates read it; TestPermissionsTableIsCurrent keeps it equal to this.
func PermissionsTable() string {
	var b strings.Builder
	b.WriteString("# Generated from the shard's controller Descriptors (cmd/shard/app) by\n")
	b.WriteString("#   go test ./test/integration/chart -run TestPermissionsTableIsCurrent -update\n")
	b.WriteString("# Do not edit: a controller's Descriptor (Permissions, plus list and watch of its\n")
	b.WriteString("# Primary and Reads) is the source. The templates grant\n")
	b.WriteString("# `base` and the `rules` of every controller the values' `controllers` enable, which\n")
	b.WriteString("# name a controller by its key here (kube-controller-manager's alias for it) or by its\n")
	b.WriteString("# `canonical` name (kube-controller-manager 1.37's).\n")
	b.WriteString("base:\n")
	writeRules(&b, "  ", shardapp.BasePermissions())
	b.WriteString("controllers:\n")
	ds := shardapp.Descriptors()
	sort.Slice(ds, func(i, j int) bool { return ds[i].Name < ds[j].Name })
	for _, d := range ds {
		fmt.Fprintf(&b, "  %s:\n", d.Name)
		if n, ok := controllers.NamesOf(d.Name); ok && n.Canonical != d.Name {
			fmt.Fprintf(&b, "    canonical: %s\n", n.Canonical)
		}
		fmt.Fprintf(&b, "    onByDefault: %t\n    rules:", d.OnByDefault)
		if len(d.AllPermissions()) == 0 {
			b.WriteString(" []\n")
			continue
		}
		b.WriteString("\n")
		writeRules(&b, "      ", d.AllPermissions())
	}
	return b.String()
}

func writeRules(b *strings.Builder, indent string, ps []controllers.Permission) {
	for _, p := range ps {
		fmt.Fprintf(b, "%s- apiGroups: [%q]\n%s  resources: [%q]\n%s  verbs: [%s]\n",
			indent, p.Group, indent, p.Resource, indent, quoteAll(p.Verbs))
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// Grant is one verb on one group/resource, the unit in which rule sets are compared.
type Grant struct{ Group, Resource, Verb string }

func (g Grant) String() string { return fmt.Sprintf("%s %q/%s", g.Verb, g.Group, g.Resource) }

// GrantsOfRules flattens RBAC rules; rules with resourceNames, non-resource URLs or a
// wildcard are returned as errors, because the shard's ClusterRole must not have them,
// except group "*" with resource "*" (every resource, named verbs), which a controller
// that acts on whatever the API server serves declares (the namespace controller), or
// with "*/<subresource>" (the disruption controller's "*/scale").
func GrantsOfRules(rules []rbacv1.PolicyRule) (map[Grant]bool, error) {
	out := map[Grant]bool{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			return nil, fmt.Errorf("rule %v names resources or URLs", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if !controllers.WildcardAllowed(g, res) || v == "*" {
						return nil, fmt.Errorf("rule %v has a wildcard", r)
					}
					out[Grant{g, res, v}] = true
				}
			}
		}
	}
	return out, nil
}

// GrantsOfNeeds is the set of grants the shard checks at start for those needs.
func GrantsOfNeeds(needs []shardapp.Need) map[Grant]bool {
	out := map[Grant]bool{}
	for _, n := range needs {
		out[Grant{n.Group, n.Resource, n.Verb}] = true
	}
	return out
}

// DiffGrants lists what got lacks from want and what it has beyond it.
func DiffGrants(want, got map[Grant]bool) (missing, extra []string) {
	for g := range want {
		if !got[g] {
			missing = append(missing, g.String())
		}
	}
	for g := range got {
		if !want[g] {
			extra = append(extra, g.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}
