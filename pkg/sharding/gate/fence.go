package gate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// ErrFenced is returned for writes attempted while the shard may not work.
type ErrFenced struct{ Deadline time.Time }

func (e ErrFenced) Error() string {
	return fmt.Sprintf("shard is fenced: its session lease ended at %s; no writes until a coordinator acknowledges it again",
		e.Deadline.Format(time.RFC3339Nano))
}

// ErrNotHeld is returned for a write to a partition the shard neither holds nor is still
// draining: the partition was never granted, was revoked (fenced or demoted), or finished
// its release, and may be worked by another shard now.
type ErrNotHeld struct {
	Partition partition.ID
	// Key is the request's or work item's key ("namespace/name", or a name).
	Key string
}

func (e ErrNotHeld) Error() string {
	return fmt.Sprintf("shard does not hold partition %d (of %q): write refused, the partition may be owned by another shard", e.Partition, e.Key)
}

// WriteAllowed reports whether the shard may write at all now: before its lease deadline.
// The queue already stops new reconciles at the deadline; this closes the gap for a
// reconcile that was running when the process was paused (a long GC pause or SIGSTOP):
// the first write it attempts after resuming is refused.
func WriteAllowed(g *Gate) error {
	if g.Fenced() {
		return ErrFenced{Deadline: g.Deadline()}
	}
	return nil
}

// WriteAllowedFor reports whether a write for key (a queue key of the Gate's mapping:
// "namespace/name", or a bare name) may leave now: the lease is valid and the key's
// partition is held, acquired or still draining after a release. The shard-wide lease
// alone is not enough: after a lapse and a new welcome the lease is valid again while a
// partition that was revoked meanwhile may already be worked elsewhere.
func (g *Gate) WriteAllowedFor(key string) error {
	p, ok := g.partitionOf(key)
	if !ok {
		return fmt.Errorf("write refused: %q maps to no partition", key)
	}
	_, err := g.writeContext(p, key)
	return err
}

// writeContext checks a write to partition p (of what, for the error) and returns the
// context of p's tenure, which ends when p is revoked.
func (g *Gate) writeContext(p partition.ID, what string) (context.Context, error) {
	if err := WriteAllowed(g); err != nil {
		g.refused.fenced.Add(1)
		return nil, err
	}
	ctx := g.tenureContext(p)
	if ctx == nil || ctx.Err() != nil {
		g.refused.notHeld.Add(1)
		return nil, ErrNotHeld{Partition: p, Key: what}
	}
	return ctx, nil
}

// FenceTransport wraps the controllers' API transport so that every mutating request
// (anything but GET, HEAD and OPTIONS) leaves only while the lease is valid and the
// request's partition is held (acquired, or draining after a release), and is cancelled
// if that partition is revoked while the request runs. The request's partition is
// ofNamespace of the namespace its URL names (RequestNamespace); cluster-scoped writes
// belong to ofNamespace(partition.ClusterKey), which is "" — the cluster partition. Use
// it as rest.Config.WrapTransport of controller clients (not of the event recorder).
func FenceTransport(g *Gate, ofNamespace func(namespace string) partition.ID) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return fenced{g: g, ofNamespace: ofNamespace, next: rt}
	}
}

type fenced struct {
	g           *Gate
	ofNamespace func(string) partition.ID
	next        http.RoundTripper
}

func (f fenced) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return f.next.RoundTrip(req)
	}
	ns, fence, ok := RequestNamespace(req.URL.Path)
	if !fence {
		return f.next.RoundTrip(req)
	}
	if !ok {
		return nil, fmt.Errorf("write refused: cannot tell which namespace %s %s belongs to", req.Method, req.URL.Path)
	}
	p := f.ofNamespace(ns)
	what := req.Method + " " + req.URL.Path
	tenure, err := f.g.writeContext(p, what)
	if err != nil {
		return nil, err
	}
	// The request ends when its caller's context ends or the partition is revoked,
	// whichever comes first; the response body stays readable until it is closed.
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(tenure, cancel)
	release := func() { stop(); cancel() }
	resp, err := f.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		release()
		if tenure.Err() != nil {
			f.g.refused.revoked.Add(1)
			return nil, fmt.Errorf("%w (revoked while the request ran: %v)", ErrNotHeld{Partition: p, Key: what}, err)
		}
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// releasingBody frees a request's revocation watch when its body is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// RequestNamespace returns the namespace whose partition a request to path belongs to:
// the namespace of a namespaced resource, a Namespace's own name for its subresources
// (namespaces/status and namespaces/finalize, the namespace controller's, which works a
// Namespace on its own partition), and partition.ClusterKey ("") for any other
// cluster-scoped resource, a Namespace object itself included (the garbage collector's
// owner reference and finalizer patches, whose queue keys of cluster-scoped objects are
// the cluster partition's) and a Namespace create.
// fence is false for requests that change nothing stored in the cluster and so need no
// owner (access and token reviews). ok is false for a path that is not a Kubernetes
// resource path: writes to it are refused, since their owner cannot be told. A prefix
// before /api or /apis (an API server behind a path-routing proxy) is skipped.
func RequestNamespace(path string) (namespace string, fence, ok bool) {
	// The path's segments are read one at a time, without splitting it: every request of
	// every controller client comes through here (the fence's writes, the load meter's
	// requests), and a split allocated on each.
	it := segments{rest: strings.Trim(path, "/")}
	var head string
	for {
		seg, more := it.next()
		if !more {
			return "", true, false
		}
		if seg == "api" || seg == "apis" {
			head = seg
			break
		}
	}
	// The segments after /api or /apis, as many as the cases below tell apart: n is
	// exact below len(after), and "len(after) or more" at it.
	var after [6]string
	n := 0
	for n < len(after) {
		seg, more := it.next()
		if !more {
			break
		}
		after[n] = seg
		n++
	}
	rest := after[:n]
	switch head {
	case "api": // /api/v1/...
		if len(rest) < 2 {
			return "", true, false
		}
		rest = rest[1:]
	case "apis": // /apis/group/version/...
		if len(rest) < 3 {
			return "", true, false
		}
		switch rest[0] {
		case "authorization.k8s.io", "authentication.k8s.io":
			return "", false, true
		}
		rest = rest[2:]
	}
	// rest is resource[/name[/subresource]] or namespaces[/ns[/resource[/...]]].
	switch {
	case rest[0] == "":
		return "", true, false
	case rest[0] != "namespaces" || len(rest) == 1:
		// A cluster-scoped object, or a create or collection delete of Namespaces.
		return partition.ClusterKey, true, true
	case rest[1] == "":
		return "", true, false
	case len(rest) == 2:
		// The Namespace rest[1] itself: cluster-scoped work.
		return partition.ClusterKey, true, true
	default:
		// An object in namespace rest[1], or the Namespace rest[1]'s status or finalize
		// subresource: both belong to that namespace's partition.
		return rest[1], true, true
	}
}

// segments yields the "/"-separated segments of a string as strings.Split would,
// without allocating.
type segments struct {
	rest string
	done bool
}

// next returns the next segment, and false once there is none.
func (s *segments) next() (string, bool) {
	if s.done {
		return "", false
	}
	seg, rest, found := strings.Cut(s.rest, "/")
	s.rest = rest
	s.done = !found
	return seg, true
}
