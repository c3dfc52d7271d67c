package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// PodFields are the values the kubelet would give a container's fieldRef env variables.
type PodFields struct {
	Name, Namespace, IP string
}

// LocalContainer is a rendered container turned into a local process: its binary, its
// environment, and its arguments with $(VAR) expanded as the kubelet does.
type LocalContainer struct {
	Binary string
	Env    map[string]string
	Args   []string
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Localize turns container c of a rendered pod spec into a local process. It changes only
// what cannot be the same outside a cluster: flags named in overrides get the given value
// (addresses on loopback), arguments under a Secret volume's mountPath point into a folder
// holding that Secret's data (secrets are the rendered ones), and --kubeconfig is added in
// place of the in-cluster configuration. An override the container does not have fails
// the test, so a renamed flag in the chart is noticed.
func Localize(t testing.TB, spec corev1.PodSpec, c corev1.Container, pod PodFields, secrets map[string]*corev1.Secret,
	kubeconfig string, overrides map[string]string) LocalContainer {
	t.Helper()
	if len(c.Command) != 1 {
		t.Fatalf("container %s: command %v, want one binary", c.Name, c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(m string) string { return expand(env, m) })
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = pod.Name
			case "metadata.namespace":
				env[e.Name] = pod.Namespace
			case "status.podIP":
				env[e.Name] = pod.IP
			default:
				t.Fatalf("container %s env %s: fieldRef %s not supported here", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("container %s env %s: only values and fieldRefs are supported here", c.Name, e.Name)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		var secretName string
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secretName = v.Secret.SecretName
			}
		}
		s := secrets[secretName]
		if s == nil {
			t.Fatalf("container %s mounts volume %s, which is no rendered Secret", c.Name, m.Name)
		}
		dir := t.TempDir()
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounts[m.MountPath] = dir
	}
	used := map[string]bool{}
	args := []string{"--kubeconfig=" + kubeconfig}
	for _, a := range c.Args {
		a = varRef.ReplaceAllStringFunc(a, func(m string) string { return expand(env, m) })
		if name, _, ok := strings.Cut(a, "="); ok {
			if v, ok := overrides[name]; ok {
				a, used[name] = name+"="+v, true
			}
		}
		for mp, dir := range mounts {
			if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(value, mp+"/") {
				a = name + "=" + dir + strings.TrimPrefix(value, mp)
			}
		}
		args = append(args, a)
	}
	for name := range overrides {
		if !used[name] {
			t.Fatalf("container %s has no %s flag to override; args: %v", c.Name, name, c.Args)
		}
	}
	return LocalContainer{Binary: filepath.Base(c.Command[0]), Env: env, Args: args}
}

func expand(env map[string]string, ref string) string {
	if v, ok := env[ref[2:len(ref)-1]]; ok {
		return v
	}
	return ref
}

// String is the command line, for logs.
func (l LocalContainer) String() string {
	return fmt.Sprintf("%v %s %s", l.Env, l.Binary, strings.Join(l.Args, " "))
}
