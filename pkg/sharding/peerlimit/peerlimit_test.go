package peerlimit

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
)

func TestKey(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{name: "no peer", ctx: context.Background(), want: Unknown},
		{name: "IPv4, the port ignored", ctx: peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 41234}}), want: "10.0.0.7"},
		{name: "IPv6", ctx: peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("fd00::7"), Port: 1}}), want: "fd00::7"},
		{name: "not TCP", ctx: peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}}), want: "/run/x.sock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Key(tc.ctx); got != tc.want {
				t.Errorf("Key() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGate: one key cannot take more than its share, the total bounds all keys, and a
// key's entry is gone once it holds nothing.
func TestGate(t *testing.T) {
	tests := []struct {
		name       string
		held       map[string]int // places taken first
		key        string
		wantReason string
	}{
		{name: "a key below its share", held: map[string]int{"a": 1}, key: "a"},
		{name: "a key at its share", held: map[string]int{"a": 2}, key: "a", wantReason: ReasonPerKey},
		{name: "another key while one is at its share", held: map[string]int{"a": 2}, key: "b"},
		{name: "the total reached by other keys", held: map[string]int{"a": 2, "b": 2, "c": 1}, key: "d", wantReason: ReasonTotal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGate(2, 5)
			var releases []func()
			for k, n := range tc.held {
				for range n {
					rel, reason := g.Acquire(k)
					if rel == nil {
						t.Fatalf("setup: Acquire(%s) refused: %s", k, reason)
					}
					releases = append(releases, rel)
				}
			}
			rel, reason := g.Acquire(tc.key)
			if reason != tc.wantReason || (rel == nil) != (tc.wantReason != "") {
				t.Fatalf("Acquire(%s) = (release %t, %q), want %q", tc.key, rel != nil, reason, tc.wantReason)
			}
			if rel != nil {
				releases = append(releases, rel, rel) // a second call does nothing
			}
			for _, r := range releases {
				r()
			}
			if n, keys := g.InFlight(); n != 0 || keys != 0 {
				t.Errorf("after every release: %d in flight over %d keys, want none", n, keys)
			}
		})
	}
}

// TestBucketsBounded: the table never grows past its bound however many keys come;
// refilled buckets make room, buckets still in use do not.
func TestBucketsBounded(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name     string
		later    time.Duration
		wantOK   bool
		wantFull bool
	}{
		{name: "every bucket in use", later: 100 * time.Millisecond, wantFull: true},
		{name: "refilled buckets dropped", later: 10 * time.Second, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuckets(1, 2, 3)
			for i := range 3 {
				if ok, _ := b.Allow(fmt.Sprint(i), start); !ok {
					t.Fatalf("first token of %d refused", i)
				}
			}
			ok, full := b.Allow("new", start.Add(tc.later))
			if ok != tc.wantOK || full != tc.wantFull {
				t.Errorf("Allow(new) = %t, full %t; want %t, %t", ok, full, tc.wantOK, tc.wantFull)
			}
			if n := b.Len(); n > 3 {
				t.Errorf("%d buckets, bound 3", n)
			}
		})
	}
	t.Run("a key's own burst", func(t *testing.T) {
		b := NewBuckets(1, 2, 3)
		for i, want := range []bool{true, true, false} {
			if ok, full := b.Allow("a", start); ok != want || full {
				t.Errorf("token %d: %t, full %t; want %t", i+1, ok, full, want)
			}
		}
	})
}
