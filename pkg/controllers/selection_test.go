package controllers

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestSelection(t *testing.T) {
	known := []string{"deployment", "replicaset", "job"}
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
