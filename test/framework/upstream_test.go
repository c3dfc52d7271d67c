package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// The kcm-controllers record names controllers by kube-controller-manager's canonical
// name (hack/cluster.sh since kshard took both names) or by alias (older records), and
// tests ask by either.
func TestKCMRuns(t *testing.T) {
	for _, tc := range []struct {
		record string
		name   string
		want   bool
	}{
		{record: "*", name: "replicaset", want: true},
		{record: "*,-replicaset-controller", name: "replicaset", want: false},
		{record: "*,-replicaset-controller", name: "replicaset-controller", want: false},
		{record: "*,-replicaset", name: "replicaset-controller", want: false},
		{record: "*,-replicaset", name: "replicaset", want: false},
		{record: "*,-replicaset-controller", name: "deployment", want: true},
		{record: "*, -namespace-controller", name: NamespaceController, want: false},
		{record: "job-controller", name: "job", want: true},
		{record: "job-controller", name: "cronjob", want: false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "kcm-controllers"), []byte(tc.record+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		f := &Framework{Kubeconfig: filepath.Join(dir, "kubeconfig")}
		got, err := f.KCMRuns(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("--controllers=%s: KCMRuns(%q) = %t, want %t", tc.record, tc.name, got, tc.want)
		}
	}
}
