package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

func TestStartSync(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	ctx, log, namespace, name, err := StartSync(klog.NewContext(context.Background(), base), "ns/obj")
	if err != nil || namespace != "ns" || name != "obj" {
		t.Fatalf("StartSync = %q, %q, %v; want ns, obj, nil", namespace, name, err)
	}
	log.Info("from the logger")
	klog.FromContext(ctx).Info("from the context")
	for _, l := range lines {
		if !strings.Contains(l, `"namespace"="ns" "name"="obj"`) {
			t.Errorf("logged %s, want the object's namespace and name", l)
		}
	}
	if len(lines) != 2 {
		t.Errorf("logged %d lines, want 2", len(lines))
	}

	if _, _, _, _, err := StartSync(context.Background(), "a/b/c"); err == nil || !strings.Contains(err.Error(), `invalid key "a/b/c"`) {
		t.Errorf("StartSync of a malformed key: err = %v, want it named", err)
	}
}
