package framework

import (
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// ByteProxy forwards TCP connections from a loopback port of its own to the API server
// and counts the bytes that pass in each direction. It does not terminate TLS: a process
// given a kubeconfig that points at the proxy (ProxiedKubeconfig) still verifies the API
// server's certificate (valid for 127.0.0.1) and authenticates as before, and the counts
// are what crossed the wire for that process alone: TLS records, HTTP framing and, where
// the client accepted it, gzip-compressed bodies (kube-apiserver compresses responses over
// 128 KiB to clients that accept gzip, as client-go does by default).
type ByteProxy struct {
	ln     net.Listener
	target string
	// down counts the bytes from the API server to the client, up the other way.
	down, up atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

// StartByteProxy listens on a free loopback port and forwards every connection to
// target (host:port). It is closed when the test ends.
func StartByteProxy(t testing.TB, target string) *ByteProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ByteProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *ByteProxy) Addr() string { return p.ln.Addr().String() }

// Down is the number of bytes the API server sent through the proxy so far.
func (p *ByteProxy) Down() int64 { return p.down.Load() }

// Up is the number of bytes the clients sent through the proxy so far.
func (p *ByteProxy) Up() int64 { return p.up.Load() }

// Close stops accepting, cuts every open connection and waits for the copies to end.
func (p *ByteProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *ByteProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *ByteProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *ByteProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client, &p.down)
		go p.pipe(client, server, &p.up)
	}
}

// pipe copies from src to dst, counting into n, and closes both when either side ends.
func (p *ByteProxy) pipe(src, dst net.Conn, n *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil { // io.EOF or a closed connection
			break
		}
	}
	_ = src.Close()
	_ = dst.Close()
	p.untrack(src)
	p.untrack(dst)
}

// ProxiedKubeconfig writes a copy of kubeconfig (into the test's temporary folder, named
// after name) whose every cluster's server is https://<proxy address>, so that a process
// started with it reaches the API server through p.
func ProxiedKubeconfig(t testing.TB, kubeconfig, name string, p *ByteProxy) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.Addr()
	}
	out := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}
