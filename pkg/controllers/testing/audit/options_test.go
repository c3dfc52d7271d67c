package audit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// Each Descriptor carries the options its flags set: two shards' descriptors in one
// process (a test that builds two registries) do not share them, and New reads them.
func TestDescriptorCarriesItsOptions(t *testing.T) {
	dir := t.TempDir()
	newCtrl := func(file string, resync time.Duration) (*Controller, *controllertest.Queue) {
		d := Descriptor()
		fs := pflag.NewFlagSet("shard", pflag.ContinueOnError)
		d.AddFlags(fs)
		if err := fs.Parse([]string{"--audit-log-file=" + file, "--audit-resync-interval=" + resync.String(), "--audit-work-duration=1ms"}); err != nil {
			t.Fatal(err)
		}
		factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
		q := controllertest.NewQueue()
		c := controllertest.Context(d, factory, q)
		c.Shard = filepath.Base(file)
		c.WriteAllowed = func(string) error { return nil }
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "probe", Labels: map[string]string{Label: "true"}}}
		controllertest.Informers{SharedInformerFactory: factory}.Add(t, cm)
		ctrl, err := d.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ctrl.(*Controller).out.Close() })
		return ctrl.(*Controller), q
	}
	a, qa := newCtrl(filepath.Join(dir, "a.jsonl"), 3*time.Second)
	b, qb := newCtrl(filepath.Join(dir, "b.jsonl"), 5*time.Second)
	for _, tc := range []struct {
		c    *Controller
		q    *controllertest.Queue
		file string
		want time.Duration
	}{{a, qa, "a.jsonl", 3 * time.Second}, {b, qb, "b.jsonl", 5 * time.Second}} {
		if err := tc.c.sync(context.Background(), "ns/probe"); err != nil {
			t.Fatal(err)
		}
		if got, ok := tc.q.After("ns/probe"); !ok || got != tc.want {
			t.Errorf("%s: requeued after %v (%t), want %v", tc.file, got, ok, tc.want)
		}
		data, err := os.ReadFile(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"shard":"`+tc.file+`"`) {
			t.Errorf("%s holds %q, want the record of its own controller", tc.file, data)
		}
	}
}

// Without --audit-log-file the controller refuses to start.
func TestNeedsLogFile(t *testing.T) {
	d := Descriptor()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	if _, err := d.New(controllertest.Context(d, factory, controllertest.NewQueue())); err == nil || !strings.Contains(err.Error(), "--audit-log-file") {
		t.Errorf("New without --audit-log-file: %v, want an error naming the flag", err)
	}
}
