package controllers

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestSelection(t *testing.T) {
	known := []string{"deployment", "replicaset", "job", "root-ca-cert-publisher", "kshard-audit"}
	tests := []struct {
		name        string
		sel         Selection
		controller  string
		onByDefault bool
		want        bool
		wantErr     string
	}{
		{name: "star enables default-on", sel: Selection{"*"}, controller: "job", onByDefault: true, want: true},
		{name: "star skips default-off", sel: Selection{"*"}, controller: "job", onByDefault: false, want: false},
		{name: "explicit enables default-off", sel: Selection{"*", "job"}, controller: "job", want: true},
		{name: "minus wins over star", sel: Selection{"*", "-job"}, controller: "job", onByDefault: true, want: false},
		{name: "minus before star still wins", sel: Selection{"-job", "*"}, controller: "job", onByDefault: true, want: false},
		{name: "only named", sel: Selection{"deployment"}, controller: "replicaset", onByDefault: true, want: false},
		{name: "unknown name", sel: Selection{"*", "-deploymnet"}, wantErr: `unknown controller(s) ["-deploymnet"]`},
		{name: "empty name", sel: Selection{"-"}, wantErr: "unknown controller"},
		{name: "an earlier entry wins over a later one", sel: Selection{"job", "-job"}, controller: "job", want: true},
		// kube-controller-manager's --controllers takes a controller's canonical name and
		// its alias alike, and so does the shard's: each form, in each of the syntax's roles.
		{name: "alias enables", sel: Selection{"replicaset"}, controller: "replicaset", want: true},
		{name: "canonical name enables", sel: Selection{"replicaset-controller"}, controller: "replicaset", want: true},
		{name: "canonical name enables, not another", sel: Selection{"replicaset-controller"}, controller: "deployment", onByDefault: true, want: false},
		{name: "-alias disables", sel: Selection{"*", "-replicaset"}, controller: "replicaset", onByDefault: true, want: false},
		{name: "-canonical disables", sel: Selection{"*", "-replicaset-controller"}, controller: "replicaset", onByDefault: true, want: false},
		{name: "-canonical disables only its own", sel: Selection{"*", "-replicaset-controller"}, controller: "deployment", onByDefault: true, want: true},
		{name: "star with canonical enables default-off", sel: Selection{"*", "deployment-controller"}, controller: "deployment", want: true},
		{name: "alias differs from canonical", sel: Selection{"root-ca-certificate-publisher-controller"}, controller: "root-ca-cert-publisher", want: true},
		{name: "first entry wins across forms: disable", sel: Selection{"-replicaset-controller", "replicaset"}, controller: "replicaset", want: false},
		{name: "first entry wins across forms: enable", sel: Selection{"replicaset", "-replicaset-controller"}, controller: "replicaset", want: true},
		{name: "asked by canonical name", sel: Selection{"-replicaset"}, controller: "replicaset-controller", onByDefault: true, want: false},
		{name: "a name kube-controller-manager does not know", sel: Selection{"kshard-audit"}, controller: "kshard-audit", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate(known)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.sel.Enabled(tc.controller, tc.onByDefault); got != tc.want {
				t.Errorf("Enabled(%q) = %v, want %v", tc.controller, got, tc.want)
			}
		})
	}
}

// A second --controllers adds to the first (the test framework adds the namespace
// housekeeping controllers to a test's list so), and an earlier "-name" still wins.
func TestSelectionFlagRepeated(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want map[string]bool
	}{
		{name: "appended", args: []string{"--controllers", "job", "--controllers", "serviceaccount"},
			want: map[string]bool{"job": true, "serviceaccount": true, "cronjob": false}},
		{name: "an earlier -name wins", args: []string{"--controllers", "job,-serviceaccount", "--controllers", "serviceaccount"},
			want: map[string]bool{"job": true, "serviceaccount": false}},
		{name: "once: the default * is replaced", args: []string{"--controllers", "serviceaccount"},
			want: map[string]bool{"job": false, "serviceaccount": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := append(Selection(nil), DefaultSelection...)
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			s.AddFlags(fs, []string{"job", "cronjob", "serviceaccount"})
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				if got := s.Enabled(name, true); got != want {
					t.Errorf("%v: %s enabled %t, want %t", s, name, got, want)
				}
			}
		})
	}
}

// An unknown name is an error that names every known controller in both of its forms,
// and says so of a kube-controller-manager controller kshard does not implement.
func TestSelectionUnknownNames(t *testing.T) {
	known := []string{"deployment", "replicaset", "kshard-audit"}
	tests := []struct {
		name string
		sel  Selection
		want []string
	}{
		{name: "typo", sel: Selection{"replicaset-controler"}, want: []string{`unknown controller(s) ["replicaset-controler"]`}},
		{name: "disabled typo", sel: Selection{"*", "-replicaset-controler"}, want: []string{`["-replicaset-controler"]`}},
		{name: "kube-controller-manager's, not kshard's (alias)", sel: Selection{"*", "-garbagecollector"},
			want: []string{`"-garbagecollector" is kube-controller-manager's garbage-collector-controller (alias garbagecollector), which kshard does not implement`}},
		{name: "kube-controller-manager's, not kshard's (canonical)", sel: Selection{"taint-eviction-controller"},
			want: []string{`"taint-eviction-controller" is kube-controller-manager's taint-eviction-controller, which kshard does not implement`}},
		{name: "a canonical name is no prefix", sel: Selection{"replicaset-"}, want: []string{`["replicaset-"]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate(known)
			if err == nil {
				t.Fatalf("Validate(%v) = nil", tc.sel)
			}
			want := append(tc.want, "known, by kube-controller-manager's canonical name or alias: deployment-controller (alias deployment), kshard-audit, replicaset-controller (alias replicaset)")
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate(%v) = %v\nwant it to contain %q", tc.sel, err, w)
				}
			}
		})
	}
}
