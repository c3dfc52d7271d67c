package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kshard/kshard/test/testpki"
)

// TestRootCA renders the rootCA value's forms: none (no --root-ca-file: the shards'
// ServiceAccount CA), a PEM (a ConfigMap of the chart, mounted), an existing ConfigMap or
// Secret (mounted, its key renamed to ca.crt), and the refusals.
func TestRootCA(t *testing.T) {
	pem, err := os.ReadFile(testpki.New(t).CA)
	if err != nil {
		t.Fatal(err)
	}
	values := func(t *testing.T, rootCA map[string]string) string {
		b, err := yaml.Marshal(map[string]any{"rootCA": rootCA})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const mounted = "/etc/kshard/root-ca/ca.crt"
	for _, tc := range []struct {
		name   string
		rootCA map[string]string
		// wantFile is --root-ca-file ("" = not passed); wantConfigMap / wantSecret the
		// volume's source and wantKey the key it maps to ca.crt.
		wantFile, wantConfigMap, wantSecret, wantKey string
		wantError                                    string
	}{
		{name: "default: the shards' own CA"},
		{name: "a PEM", rootCA: map[string]string{"pem": string(pem)},
			wantFile: mounted, wantConfigMap: "kshard-root-ca", wantKey: "ca.crt"},
		{name: "an existing ConfigMap", rootCA: map[string]string{"existingConfigMap": "corp-ca", "key": "bundle.pem"},
			wantFile: mounted, wantConfigMap: "corp-ca", wantKey: "bundle.pem"},
		{name: "an existing Secret", rootCA: map[string]string{"existingSecret": "corp-ca"},
			wantFile: mounted, wantSecret: "corp-ca", wantKey: "ca.crt"},
		{name: "two sources", rootCA: map[string]string{"pem": string(pem), "existingSecret": "corp-ca"},
			wantError: "rootCA: set at most one of pem, existingConfigMap and existingSecret"},
		{name: "a PEM without a certificate", rootCA: map[string]string{"pem": "not a certificate"},
			wantError: "rootCA.pem: not a PEM certificate bundle"},
		{name: "an unknown field", rootCA: map[string]string{"file": "/ca.crt"}, wantError: "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []string
			if tc.rootCA != nil {
				files = append(files, values(t, tc.rootCA))
			}
			if tc.wantError != "" {
				out, err := RunHelm(t, "template", "kshard", ChartDir(), "--namespace", "kshard-system", "--values", files[0])
				if err == nil || !strings.Contains(out, tc.wantError) {
					t.Fatalf("helm template: error %v, output %q; want an error containing %q", err, lastLines(out), tc.wantError)
				}
				return
			}
			objs, _ := Render(t, "kshard", "kshard-system", files)
			var shard appsv1.Deployment
			Into(t, objs.Get(t, "Deployment", "kshard-shard"), &shard)
			pod := shard.Spec.Template.Spec
			if got := flagValue(pod.Containers[0].Args, "--root-ca-file"); got != tc.wantFile {
				t.Errorf("--root-ca-file = %q, want %q", got, tc.wantFile)
			}
			var vol *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == "root-ca" {
					vol = &pod.Volumes[i]
				}
			}
			var mount *corev1.VolumeMount
			for i, m := range pod.Containers[0].VolumeMounts {
				if m.Name == "root-ca" {
					mount = &pod.Containers[0].VolumeMounts[i]
				}
			}
			if tc.wantFile == "" {
				if vol != nil || mount != nil || len(objs.Kind("ConfigMap").named("kshard-root-ca")) != 0 {
					t.Errorf("no rootCA, but volume %+v mount %+v", vol, mount)
				}
				return
			}
			if vol == nil || mount == nil || mount.MountPath+"/ca.crt" != tc.wantFile || !mount.ReadOnly {
				t.Fatalf("volume %+v mount %+v, want root-ca mounted read-only at %s", vol, mount, filepath.Dir(tc.wantFile))
			}
			var items []corev1.KeyToPath
			switch {
			case tc.wantSecret != "":
				if vol.Secret == nil || vol.Secret.SecretName != tc.wantSecret {
					t.Fatalf("volume %+v, want Secret %s", vol.VolumeSource, tc.wantSecret)
				}
				items = vol.Secret.Items
			default:
				if vol.ConfigMap == nil || vol.ConfigMap.Name != tc.wantConfigMap {
					t.Fatalf("volume %+v, want ConfigMap %s", vol.VolumeSource, tc.wantConfigMap)
				}
				items = vol.ConfigMap.Items
			}
			if len(items) != 1 || items[0].Key != tc.wantKey || items[0].Path != "ca.crt" {
				t.Errorf("volume items %+v, want %s as ca.crt", items, tc.wantKey)
			}
			if tc.rootCA["pem"] != "" {
				var cm corev1.ConfigMap
				Into(t, objs.Get(t, "ConfigMap", "kshard-root-ca"), &cm)
				if cm.Data["ca.crt"] != string(pem) {
					t.Errorf("ConfigMap kshard-root-ca holds %q, want the PEM", cm.Data["ca.crt"])
				}
				if shard.Spec.Template.Annotations["kshard.io/root-ca-checksum"] == "" {
					t.Error("no checksum annotation: a new PEM would not roll the shards")
				}
			}
		})
	}
}

// named returns the objects of o named name.
func (o Objects) named(name string) Objects {
	var out Objects
	for _, u := range o {
		if u.GetName() == name {
			out = append(out, u)
		}
	}
	return out
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], "\n")
}
