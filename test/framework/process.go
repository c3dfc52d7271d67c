package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary returns the path of a kshard binary built by `make build` (KSHARD_BIN_DIR, default
// <repo>/bin), failing the test when it is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("KSHARD_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not built: run 'make build' (%v)", p, err)
	}
	return p
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a kshard binary the test started. Its output goes to a log file in the
// test's artifacts folder, named after the process.
type Process struct {
	Name    string
	Args    []string
	LogPath string
	cmd     *exec.Cmd
	mu      sync.Mutex
	done    chan struct{}
	err     error
}

// Start runs bin with args; the process is killed when the test ends.
func Start(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	dir := ArtifactsDir(t)
	p := &Process{Name: name, Args: args, LogPath: filepath.Join(dir, name+".log")}
	p.start(t, bin)
	t.Cleanup(func() {
		if t.Failed() && !p.Exited() {
			// Leave every goroutine's stack in the log for the investigation.
			_ = p.Signal(syscall.SIGCONT)
			_ = p.Signal(syscall.SIGQUIT)
			_, _ = p.Wait(3 * time.Second)
		}
		p.Kill()
	})
	return p
}

func (p *Process) start(t testing.TB, bin string) {
	t.Helper()
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, p.Args...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", p.Name, err)
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// Pid is the process id.
func (p *Process) Pid() int { p.mu.Lock(); defer p.mu.Unlock(); return p.cmd.Process.Pid }

// Signal sends sig (SIGTERM, SIGKILL, SIGSTOP, SIGCONT, …).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to end; it reports whether it ended and its
// exit error.
func (p *Process) Wait(timeout time.Duration) (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	case <-time.After(timeout):
		return false, nil
	}
}

// Kill ends the process at once (continuing it first if it was stopped).
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGKILL)
	_, _ = p.Wait(10 * time.Second)
}

// WaitHTTP polls url until it answers 200 or timeout passes.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "GET "+url+" answers 200", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("status %d", resp.StatusCode)
		}
		return true, nil
	})
}

// ArtifactsDir is where a test keeps logs of the processes it starts:
// KSHARD_ARTIFACTS (default <repo>/_output/artifacts)/<test name>. It survives the test
// so a failure can be investigated.
func ArtifactsDir(t testing.TB) string {
	base := os.Getenv("KSHARD_ARTIFACTS")
	if base == "" {
		base = filepath.Join(RepoRoot(), "_output", "artifacts")
	}
	dir := filepath.Join(base, strings.TrimSuffix(namePrefix(t.Name()), "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
