package rootcacertpublisher

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
	"github.com/kshard/kshard/test/testpki"
)

func TestHandlers(t *testing.T) {
	log := controllertest.Logger(t)
	other := rootCM("ns")
	other.Name = "other"
	for _, tc := range []struct {
		name   string
		handle func(c *Controller)
		want   []string
	}{
		{name: "namespace added", handle: func(c *Controller) { c.namespaceAdded(log, namespace("ns", corev1.NamespaceActive)) },
			want: []string{"ns"}},
		{name: "terminating namespace added: queued (the API server refuses the create)",
			handle: func(c *Controller) { c.namespaceAdded(log, namespace("ns", corev1.NamespaceTerminating)) },
			want:   []string{"ns"}},
		{name: "active namespace updated", handle: func(c *Controller) { c.namespaceUpdated(log, namespace("ns", corev1.NamespaceActive)) },
			want: []string{"ns"}},
		{name: "terminating namespace updated: not queued",
			handle: func(c *Controller) { c.namespaceUpdated(log, namespace("ns", corev1.NamespaceTerminating)) }},
		{name: "kube-root-ca.crt updated or deleted", handle: func(c *Controller) { c.configMapChanged(log, rootCM("ns")) },
			want: []string{"ns"}},
		{name: "kube-root-ca.crt deleted, seen by a relist",
			handle: func(c *Controller) {
				c.configMapChanged(log, toolscache.DeletedFinalStateUnknown{Key: "ns/kube-root-ca.crt", Obj: rootCM("ns")})
			}, want: []string{"ns"}},
		{name: "another ConfigMap: not queued", handle: func(c *Controller) { c.configMapChanged(log, other) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			tc.handle(f.ctrl)
			if got := f.Queue.Keys(); !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRootCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := os.ReadFile(testpki.New(t).CA)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("ca.crt", ca)
	for _, tc := range []struct {
		name      string
		file      string
		clientCA  []byte
		want      []byte
		wantError string
	}{
		{name: "the file, as read", file: good, clientCA: []byte("ignored"), want: ca},
		{name: "no file: the client's CA", clientCA: ca, want: ca},
		{name: "a missing file", file: filepath.Join(dir, "missing"), wantError: "--root-ca-file: open"},
		{name: "a file without a PEM certificate", file: write("junk", []byte("not a certificate")), wantError: "--root-ca-file=" + dir},
		{name: "an empty file", file: write("empty", nil), wantError: "--root-ca-file=" + dir},
		{name: "no file and no client CA", wantError: "--root-ca-file is not set and the shard's client configuration has no CA bundle"},
		{name: "no file and a client CA that is not PEM", clientCA: []byte("junk"), wantError: "CA bundle of the shard's client configuration is not usable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rootCA(tc.file, tc.clientCA)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(tc.want) {
				t.Errorf("bundle %q, want %q", got, tc.want)
			}
		})
	}
}

// The descriptor is kube-controller-manager's: the alias its --controllers accepts, on by
// default, one fixed worker (kube-controller-manager starts it with one, no flag), keys of
// namespaces, and --root-ca-file.
func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if d.Name != "root-ca-cert-publisher" || !d.OnByDefault || d.FixedWorkers != 1 || d.WorkersFlag != "" {
		t.Errorf("descriptor %+v", d)
	}
	if !slices.Equal(d.Primary, []controllers.Resource{namespaces}) {
		t.Errorf("primary %v, want namespaces", d.Primary)
	}
	reg, err := controllers.NewRegistry(d)
	if err != nil {
		t.Fatal(err)
	}
	// --root-ca-file is the constructor's: a file that is not there stops the shard's
	// start with an error naming the flag.
	fs := pflag.NewFlagSet("shard", pflag.ContinueOnError)
	reg.AddFlags(fs)
	if err := fs.Parse([]string{"--root-ca-file=" + filepath.Join(t.TempDir(), "missing")}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, nil)
	c := controllertest.Context(d, informers.NewSharedInformerFactory(f.Client, 0), f.Queue)
	if _, err := d.New(c); err == nil || !strings.Contains(err.Error(), "--root-ca-file") {
		t.Errorf("New with a missing --root-ca-file: error %v", err)
	}
}
