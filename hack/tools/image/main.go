// Command image builds kshard's container image without a Docker engine: both static
// binaries in one layer on an empty base, run as the non-root user 65532, written as a
// tarball that `docker load` and `crane push` read. Its verify command opens such a
// tarball and checks what the Helm chart relies on.
//
//	image build  --coordinator FILE --shard FILE --tag REPO:TAG --output FILE.tar
//	image verify --tarball FILE.tar --tag REPO:TAG
//	image single --binary FILE --tag REPO:TAG --output FILE.tar [--user UID]
//
// single wraps one static binary the same way (the local node's pause and CoreDNS images,
// hack/node.sh), with the binary as the entrypoint.
package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	binDir = "/usr/local/bin"
	// uid is the "nonroot" user of distroless images; the chart's securityContext runs as it.
	uid = 65532
)

// binaries are the files the image carries, by name under binDir.
var binaries = []string{"coordinator", "shard"}

// entrypoint is the image's default command; the chart names the binary of each
// container in `command`.
var entrypoint = []string{binDir + "/shard"}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|verify [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCmd(os.Args[2:])
	case "verify":
		err = verifyCmd(os.Args[2:])
	case "single":
		err = singleCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (build, verify or single)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func buildCmd(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	coordinator := fs.String("coordinator", "", "static coordinator binary")
	shard := fs.String("shard", "", "static shard binary")
	tag := fs.String("tag", "", "image reference to write, REPO:TAG")
	output := fs.String("output", "", "tarball to write")
	arch := fs.String("arch", runtime.GOARCH, "architecture the binaries were built for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *coordinator == "" || *shard == "" || *tag == "" || *output == "" {
		return errors.New("build needs --coordinator, --shard, --tag and --output")
	}
	files := map[string]string{"coordinator": *coordinator, "shard": *shard}
	return writeImage(*tag, *output, *arch, uid, binaries, files, entrypoint, map[string]string{
		"org.opencontainers.image.title":  "kshard",
		"org.opencontainers.image.source": "https://github.com/kshard/kshard",
	})
}

func singleCmd(args []string) error {
	fs := flag.NewFlagSet("single", flag.ContinueOnError)
	binary := fs.String("binary", "", "static binary, the image's entrypoint")
	tag := fs.String("tag", "", "image reference to write, REPO:TAG")
	output := fs.String("output", "", "tarball to write")
	user := fs.Int("user", uid, "user (and group) id the image runs as")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *tag == "" || *output == "" {
		return errors.New("single needs --binary, --tag and --output")
	}
	n := filepath.Base(*binary)
	return writeImage(*tag, *output, runtime.GOARCH, *user, []string{n}, map[string]string{n: *binary},
		[]string{binDir + "/" + n}, map[string]string{"org.opencontainers.image.title": n})
}

// writeImage writes the tarball of an image holding the static binaries names (files
// maps each to its path) under binDir, run as user.
func writeImage(tag, output, arch string, user int, names []string, files map[string]string, entry []string, labels map[string]string) error {
	ref, err := name.NewTag(tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	for _, n := range names {
		if err := checkStatic(files[n]); err != nil {
			return err
		}
	}
	layerTar, err := rootfs(names, files, user)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.User = fmt.Sprintf("%d:%d", user, user)
	cf.Config.Entrypoint = entry
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=" + binDir}
	cf.Config.Labels = map[string]string{"org.opencontainers.image.version": ref.TagStr()}
	for k, v := range labels {
		cf.Config.Labels[k] = v
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	// Fixed timestamps: the same binaries give the same digest.
	img, err = mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0).UTC()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(output, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image:   %s\ntarball: %s\ndigest:  %s\nload it: docker load -i %s   (or push: crane push %s %s)\n",
		ref, output, digest, output, output, ref)
	return nil
}

// rootfs is the layer: the binaries and an /etc/passwd that names the user.
func rootfs(names []string, files map[string]string, user int) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(p string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: epoch})
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"etc", "tmp", "usr", "usr/local", "usr/local/bin"} {
		if err := dir(d); err != nil {
			return nil, err
		}
	}
	if err := file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", user, user)); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", user)); err != nil {
		return nil, err
	}
	for _, n := range names {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return nil, err
		}
		if err := file(strings.TrimPrefix(binDir, "/")+"/"+n, 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic fails unless path is a Linux ELF executable without a dynamic loader (an
// empty base image has no libc) built by Go with cgo off.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (has an ELF interpreter): build it with CGO_ENABLED=0", path)
		}
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: no Go build information: %w", path, err)
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			return fmt.Errorf("%s was built with CGO_ENABLED=%s", path, s.Value)
		}
	}
	return nil
}

func verifyCmd(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	path := fs.String("tarball", "", "image tarball written by build")
	tag := fs.String("tag", "", "image reference expected in the tarball, REPO:TAG")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || *tag == "" {
		return errors.New("verify needs --tarball and --tag")
	}
	ref, err := name.NewTag(*tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", *tag, err)
	}
	img, err := tarball.ImageFromPath(*path, &ref)
	if err != nil {
		return fmt.Errorf("opening %s as %s: %w", *path, ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	var problems []string
	if want := fmt.Sprintf("%d:%d", uid, uid); cf.Config.User != want {
		problems = append(problems, fmt.Sprintf("user %q, want %q", cf.Config.User, want))
	}
	if !slices.Equal(cf.Config.Entrypoint, entrypoint) {
		problems = append(problems, fmt.Sprintf("entrypoint %q, want %q", cf.Config.Entrypoint, entrypoint))
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		problems = append(problems, fmt.Sprintf("platform %s/%s", cf.OS, cf.Architecture))
	}
	if v := cf.Config.Labels["org.opencontainers.image.version"]; v != ref.TagStr() {
		problems = append(problems, fmt.Sprintf("version label %q, want %q", v, ref.TagStr()))
	}
	dir, err := os.MkdirTemp("", "kshard-image-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	found, err := extractBinaries(img, dir)
	if err != nil {
		return err
	}
	for _, n := range binaries {
		h, ok := found[n]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s/%s missing", binDir, n))
			continue
		}
		if h.Mode&0o111 == 0 || h.Uid != 0 {
			problems = append(problems, fmt.Sprintf("%s/%s: mode %o uid %d (want executable, owned by root so the non-root user cannot change it)", binDir, n, h.Mode, h.Uid))
		}
		p := filepath.Join(dir, n)
		if err := checkStatic(p); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out, err := exec.Command(p, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage of "+n) {
			problems = append(problems, fmt.Sprintf("%s --help: %v\n%s", n, err, out))
			continue
		}
		fmt.Printf("ok: %s/%s runs (--help: %d lines)\n", binDir, n, strings.Count(string(out), "\n"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s:\n  %s", *path, strings.Join(problems, "\n  "))
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("ok: %s %s user %s entrypoint %v\n", ref, digest, cf.Config.User, cf.Config.Entrypoint)
	return nil
}

// extractBinaries writes the image's binaries into dir and returns their tar headers.
func extractBinaries(img v1.Image, dir string) (map[string]*tar.Header, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return found, nil
		}
		if err != nil {
			return nil, err
		}
		n := strings.TrimPrefix("/"+strings.TrimPrefix(h.Name, "./"), binDir+"/")
		if !slices.Contains(binaries, n) || h.Typeflag != tar.TypeReg {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		found[n] = h
	}
}
