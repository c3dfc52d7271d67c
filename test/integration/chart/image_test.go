package chart

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kshard/kshard/test/framework"
)

// TestImage builds `make image`'s tarball into a temporary folder, verifies it with
// go-containerregistry (hack/tools/image verify: both static binaries, user 65532, the
// entrypoint, each binary runs), and checks that the tarball carries the reference the
// chart's default values pull.
func TestImage(t *testing.T) {
	out := t.TempDir()
	script := filepath.Join(framework.RepoRoot(), "hack", "image.sh")
	run := func(arg string) string {
		cmd := exec.Command(script, arg)
		cmd.Env = append(os.Environ(), "KSHARD_IMAGE_OUT="+out)
		b, err := cmd.CombinedOutput()
		t.Logf("hack/image.sh %s:\n%s", arg, b)
		if err != nil {
			t.Fatalf("hack/image.sh %s: %v", arg, err)
		}
		return string(b)
	}
	built := run("build")
	if !regexp.MustCompile(`digest:  sha256:[0-9a-f]{64}`).MatchString(built) {
		t.Errorf("make image printed no digest")
	}
	verified := run("verify")
	for _, want := range []string{"ok: /usr/local/bin/coordinator runs", "ok: /usr/local/bin/shard runs", "user 65532:65532"} {
		if !strings.Contains(verified, want) {
			t.Errorf("verify output lacks %q", want)
		}
	}

	// The chart's default image reference is what the tarball is tagged with.
	objs, _ := Render(t, "kshard", "kshard-system", nil)
	want := objs.Get(t, "Deployment", "kshard-shard").Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"].(string)
	tarballs, _ := filepath.Glob(filepath.Join(out, "kshard-*.tar"))
	if len(tarballs) != 1 {
		t.Fatalf("want one tarball in %s, got %v", out, tarballs)
	}
	tags := repoTags(t, tarballs[0])
	if len(tags) != 1 || tags[0] != want {
		t.Errorf("tarball tags %v, chart pulls %q", tags, want)
	}
}

// repoTags reads manifest.json of a `docker save` style tarball.
func repoTags(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s has no manifest.json", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if len(m) != 1 {
			t.Fatalf("manifest.json lists %d images", len(m))
		}
		return m[0].RepoTags
	}
}
