package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kshard/kshard/test/framework"
)

// ChartDir is the chart's folder in the repository.
func ChartDir() string { return filepath.Join(framework.RepoRoot(), "charts", "kshard") }

// CIValuesFiles are the chart's ci/*-values.yaml, the values sets every render test covers.
func CIValuesFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(ChartDir(), "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in %s/ci (%v)", ChartDir(), err)
	}
	sort.Strings(files)
	return files
}

var helmPath = sync.OnceValues(func() (string, error) {
	tools := filepath.Join(framework.RepoRoot(), "hack", "tools.sh")
	cmd := exec.Command(tools, "helm")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools.sh helm: %w", err)
	}
	out, err := exec.Command(tools, "path", "helm").Output()
	if err != nil {
		return "", fmt.Errorf("hack/tools.sh path helm: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// Helm returns the helm binary hack/tools.sh builds from the module proxy (building it the
// first time).
func Helm(t testing.TB) string {
	t.Helper()
	p, err := helmPath()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// RunHelm runs helm with args and returns its combined output.
func RunHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(Helm(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	return out.String(), err
}

// Objects are the documents of a rendered chart.
type Objects []*unstructured.Unstructured

// Render runs `helm template` for a release in namespace with the values files and --set
// values, and decodes the output; a render error fails the test.
func Render(t testing.TB, release, namespace string, valuesFiles []string, set ...string) (Objects, []byte) {
	t.Helper()
	args := []string{"template", release, ChartDir(), "--namespace", namespace}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(Helm(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objs, err := Decode(stdout.Bytes())
	if err != nil {
		t.Fatalf("decoding the output of helm %s: %v", strings.Join(args, " "), err)
	}
	return objs, stdout.Bytes()
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents.
func Decode(data []byte) (Objects, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out Objects
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("a document without kind or name: %v", m)
		}
		out = append(out, u)
	}
}

// Kind returns the objects of a kind.
func (o Objects) Kind(kind string) Objects {
	var out Objects
	for _, u := range o {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// Get returns the object of kind and name, failing the test when there is none.
func (o Objects) Get(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range o {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("the rendered chart has no %s %q", kind, name)
	return nil
}

// Into converts an object into a typed API object (e.g. *appsv1.Deployment).
func Into(t testing.TB, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
