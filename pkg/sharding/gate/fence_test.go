package gate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// fenceNamespaces maps "ns-N" to partition N and everything else (the cluster key "")
// to partition 0.
func fenceNamespaces(ns string) partition.ID {
	n, _ := strconv.Atoi(strings.TrimPrefix(ns, "ns-"))
	return partition.ID(n)
}

func TestRequestNamespace(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		wantNS    string
		wantFence bool
		wantOK    bool
	}{
		{name: "core namespaced", path: "/api/v1/namespaces/ns-1/pods/p", wantNS: "ns-1", wantFence: true, wantOK: true},
		{name: "core namespaced create", path: "/api/v1/namespaces/ns-1/pods", wantNS: "ns-1", wantFence: true, wantOK: true},
		{name: "group namespaced status", path: "/apis/apps/v1/namespaces/ns-2/deployments/d/status", wantNS: "ns-2", wantFence: true, wantOK: true},
		{name: "namespace object: the garbage collector's, the cluster partition's", path: "/api/v1/namespaces/ns-3", wantNS: "", wantFence: true, wantOK: true},
		{name: "namespace status", path: "/api/v1/namespaces/ns-3/status", wantNS: "ns-3", wantFence: true, wantOK: true},
		{name: "namespace finalize", path: "/api/v1/namespaces/ns-3/finalize", wantNS: "ns-3", wantFence: true, wantOK: true},
		{name: "namespace create", path: "/api/v1/namespaces", wantNS: "", wantFence: true, wantOK: true},
		{name: "cluster-scoped core", path: "/api/v1/nodes/n1/status", wantNS: "", wantFence: true, wantOK: true},
		{name: "cluster-scoped group", path: "/apis/storage.k8s.io/v1/storageclasses/s", wantNS: "", wantFence: true, wantOK: true},
		{name: "behind a path prefix", path: "/k8s/clusters/c-1/apis/apps/v1/namespaces/ns-4/replicasets/r", wantNS: "ns-4", wantFence: true, wantOK: true},
		{name: "access review needs no owner", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", wantFence: false, wantOK: true},
		{name: "token review needs no owner", path: "/apis/authentication.k8s.io/v1/tokenreviews", wantFence: false, wantOK: true},
		{name: "not a resource path", path: "/healthz", wantFence: true},
		{name: "api root", path: "/api/v1", wantFence: true},
		{name: "empty namespace", path: "/api/v1/namespaces//pods", wantFence: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns, fence, ok := RequestNamespace(tc.path)
			if ns != tc.wantNS || fence != tc.wantFence || ok != tc.wantOK {
				t.Errorf("RequestNamespace(%q) = %q, %v, %v; want %q, %v, %v", tc.path, ns, fence, ok, tc.wantNS, tc.wantFence, tc.wantOK)
			}
		})
	}
}

func TestFenceTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	valid := func(g *Gate) { g.SetDeadline(time.Now().Add(time.Hour)) }
	expired := func(g *Gate) { g.SetDeadline(time.Now().Add(-time.Second)) }
	tests := []struct {
		name    string
		setup   func(t *testing.T, g *Gate)
		method  string
		path    string
		wantErr error // nil, ErrFenced{} or ErrNotHeld{}
	}{
		{name: "no lease yet, read", method: http.MethodGet, path: "/api/v1/namespaces/ns-1/pods"},
		{name: "held partition, write", setup: func(t *testing.T, g *Gate) { valid(g); g.Acquire(1) },
			method: http.MethodPost, path: "/api/v1/namespaces/ns-1/pods"},
		{name: "expired lease, read", setup: func(t *testing.T, g *Gate) { expired(g); g.Acquire(1) },
			method: http.MethodGet, path: "/api/v1/namespaces/ns-1/pods"},
		{name: "expired lease, write", setup: func(t *testing.T, g *Gate) { expired(g); g.Acquire(1) },
			method: http.MethodPatch, path: "/api/v1/namespaces/ns-1/pods/p", wantErr: ErrFenced{}},
		{name: "expired lease, delete", setup: func(t *testing.T, g *Gate) { expired(g); g.Acquire(1) },
			method: http.MethodDelete, path: "/api/v1/namespaces/ns-1/pods/p", wantErr: ErrFenced{}},
		{name: "valid lease, partition never held", setup: func(t *testing.T, g *Gate) { valid(g); g.Acquire(1) },
			method: http.MethodPost, path: "/api/v1/namespaces/ns-2/pods", wantErr: ErrNotHeld{}},
		{
			// The hole: the lease lapsed, the partition was revoked (and may have moved),
			// then the shard was welcomed again. A reconcile still running must not write.
			name: "welcomed again after a lapse, revoked partition",
			setup: func(t *testing.T, g *Gate) {
				valid(g)
				g.Acquire(1)
				expired(g)
				g.Revoke(1)
				valid(g)
			},
			method: http.MethodPut, path: "/apis/apps/v1/namespaces/ns-1/replicasets/r", wantErr: ErrNotHeld{},
		},
		{
			name: "draining after a release, write of its in-flight work",
			setup: func(t *testing.T, g *Gate) {
				valid(g)
				g.Acquire(1)
				g.StopStarting(1)
			},
			method: http.MethodPost, path: "/api/v1/namespaces/ns-1/pods",
		},
		{
			name: "release finished",
			setup: func(t *testing.T, g *Gate) {
				valid(g)
				g.Acquire(1)
				if err := g.Release(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			},
			method: http.MethodPost, path: "/api/v1/namespaces/ns-1/pods", wantErr: ErrNotHeld{},
		},
		{name: "cluster-scoped write without the cluster partition", setup: func(t *testing.T, g *Gate) { valid(g); g.Acquire(1) },
			method: http.MethodPatch, path: "/api/v1/nodes/n1", wantErr: ErrNotHeld{}},
		{name: "cluster-scoped write with the cluster partition", setup: func(t *testing.T, g *Gate) { valid(g); g.Acquire(0) },
			method: http.MethodPatch, path: "/api/v1/nodes/n1"},
		{name: "access review needs no partition", setup: func(t *testing.T, g *Gate) { valid(g) },
			method: http.MethodPost, path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := New(ObjectKeys(fenceNamespaces))
			if tc.setup != nil {
				tc.setup(t, g)
			}
			client := &http.Client{Transport: FenceTransport(g, fenceNamespaces)(http.DefaultTransport)}
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := client.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			var fe ErrFenced
			var nh ErrNotHeld
			switch tc.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
			case ErrFenced:
				if !errors.As(err, &fe) {
					t.Fatalf("err = %v, want ErrFenced", err)
				}
			case ErrNotHeld:
				if !errors.As(err, &nh) {
					t.Fatalf("err = %v, want ErrNotHeld", err)
				}
			}
		})
	}
}

// TestFenceTransportCancelsOnRevoke: a write that is in flight when its partition is
// revoked is cancelled, and one of a partition merely draining is not.
func TestFenceTransportCancelsOnRevoke(t *testing.T) {
	tests := []struct {
		name       string
		take       func(g *Gate)
		wantCancel bool
	}{
		{name: "revoked", take: func(g *Gate) { g.Revoke(1) }, wantCancel: true},
		{name: "draining", take: func(g *Gate) { g.StopStarting(1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arrived, finish := make(chan struct{}), make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(arrived)
				select {
				case <-r.Context().Done():
				case <-finish:
				}
			}))
			defer srv.Close()
			defer close(finish)

			g := New(ObjectKeys(fenceNamespaces))
			g.SetDeadline(time.Now().Add(time.Hour))
			g.Acquire(1)
			client := &http.Client{Transport: FenceTransport(g, fenceNamespaces)(http.DefaultTransport)}
			errc := make(chan error, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/ns-1/pods", nil)
				resp, err := client.Do(req)
				if resp != nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-arrived
			tc.take(g)
			select {
			case err := <-errc:
				var nh ErrNotHeld
				if !tc.wantCancel || !errors.As(err, &nh) {
					t.Fatalf("request ended with %v; want cancelled: %v", err, tc.wantCancel)
				}
			case <-time.After(500 * time.Millisecond):
				if tc.wantCancel {
					t.Fatal("write of a revoked partition still running")
				}
			}
		})
	}
}
