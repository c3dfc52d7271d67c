package controllers

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestNamesOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Names
		ok   bool
	}{
		{name: "replicaset", want: Names{"replicaset-controller", "replicaset"}, ok: true},
		{name: "replicaset-controller", want: Names{"replicaset-controller", "replicaset"}, ok: true},
		{name: "root-ca-cert-publisher", want: Names{"root-ca-certificate-publisher-controller", "root-ca-cert-publisher"}, ok: true},
		{name: "replicationcontroller-controller", want: Names{"replicationcontroller-controller", "replicationcontroller"}, ok: true},
		{name: "taint-eviction-controller", want: Names{Canonical: "taint-eviction-controller"}, ok: true},
		// resourceclaim's alias ends in -controller too: it is still the alias.
		{name: "resource-claim-controller", want: Names{"resourceclaim-controller", "resource-claim-controller"}, ok: true},
		{name: "kshard-audit"},
		{name: ""},
		{name: "-replicaset"},
	} {
		got, ok := NamesOf(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NamesOf(%q) = %v, %t; want %v, %t", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSameController(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"replicaset", "replicaset", true},
		{"replicaset", "replicaset-controller", true},
		{"replicaset-controller", "replicaset", true},
		{"root-ca-certificate-publisher-controller", "root-ca-cert-publisher", true},
		{"kshard-audit", "kshard-audit", true},
		{"replicaset", "deployment", false},
		{"replicaset-controller", "deployment-controller", false},
		{"replicaset", "kshard-audit", false},
		{"", "replicaset", false},
	} {
		if got := SameController(tc.a, tc.b); got != tc.want {
			t.Errorf("SameController(%q, %q) = %t, want %t", tc.a, tc.b, got, tc.want)
		}
	}
}

// Every name in the table names one controller, as kube-controller-manager's
// NewControllerDescriptors requires (it panics on a duplicate alias or an alias that is
// another controller's name).
func TestNamesTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range kcmNames {
		if !strings.HasSuffix(n.Canonical, "-controller") {
			t.Errorf("%v: canonical names end in -controller", n)
		}
		for _, name := range []string{n.Canonical, n.Alias} {
			if name == "" {
				continue
			}
			if seen[name] {
				t.Errorf("%q is in the table twice", name)
			}
			seen[name] = true
		}
	}
}

// TestNamesAreKubeControllerManagers checks the table against the local control plane's
// kube-controller-manager (hack/tools.sh builds it; skipped when it is not built): its
// canonical names are exactly those its --help lists, and its --controllers takes every
// canonical name and alias of the table (it rejects a name it does not know before it
// connects to anything).
func TestNamesAreKubeControllerManagers(t *testing.T) {
	out, err := exec.Command(filepath.Join("..", "..", "hack", "tools.sh"), "path", "kube-controller-manager").Output()
	if err != nil {
		t.Skipf("hack/tools.sh path kube-controller-manager: %v", err)
	}
	kcm := strings.TrimSpace(string(out))
	if _, err := os.Stat(kcm); err != nil {
		t.Skipf("no local kube-controller-manager (hack/tools.sh kube builds it): %v", err)
	}
	help, _ := exec.Command(kcm, "--help").CombinedOutput()
	m := regexp.MustCompile(`All controllers: ([a-z0-9, -]+)`).FindSubmatch(help)
	if m == nil {
		t.Fatalf("%s --help lists no controllers:\n%s", kcm, help)
	}
	var theirs, ours, all []string
	for _, n := range strings.Split(string(m[1]), ",") {
		theirs = append(theirs, strings.TrimSpace(n))
	}
	for _, n := range kcmNames {
		ours = append(ours, n.Canonical)
		all = append(all, n.Canonical)
		if n.Alias != "" {
			all = append(all, "-"+n.Alias)
		}
	}
	slices.Sort(theirs)
	slices.Sort(ours)
	if !slices.Equal(theirs, ours) {
		t.Errorf("kube-controller-manager's controllers:\n  %v\nthe table's canonical names:\n  %v", theirs, ours)
	}
	const sentinel = "kshard-no-such-controller"
	b, _ := exec.Command(kcm, "--controllers="+strings.Join(append(all, sentinel), ","), "--kubeconfig="+filepath.Join(t.TempDir(), "none")).CombinedOutput()
	got := regexp.MustCompile(`"([^"\\]+)\\?" is not in the list of known controllers`).FindAllSubmatch(b, -1)
	if len(got) != 1 || string(got[0][1]) != sentinel {
		t.Errorf("kube-controller-manager --controllers=<every name of the table>,%s should refuse %s alone:\n%s", sentinel, sentinel, b)
	}
}
