package gate

import (
	"fmt"
	"net/http"
	"time"
)

// ErrFenced is returned for writes attempted while the shard may not work.
type ErrFenced struct{ Deadline time.Time }

func (e ErrFenced) Error() string {
	return fmt.Sprintf("shard is fenced: its session lease ended at %s; no writes until a coordinator acknowledges it again",
		e.Deadline.Format(time.RFC3339Nano))
}

// WriteAllowed reports whether the shard may write now: not fenced and before its lease
// deadline. The queue already stops new reconciles at the deadline; this closes the gap
// for a reconcile that was running when the process was paused (a long GC pause or
// SIGSTOP): the first write it attempts after resuming is refused.
func WriteAllowed(g *Gate) error {
	if g.Fenced() {
		return ErrFenced{Deadline: g.Deadline()}
	}
	return nil
}

// FenceTransport wraps the controllers' API transport so that every mutating request
// (anything but GET, HEAD and OPTIONS) is refused while WriteAllowed fails. Use it as
// rest.Config.WrapTransport of controller clients (not of the event recorder).
func FenceTransport(g *Gate) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return fenced{g: g, next: rt}
	}
}

type fenced struct {
	g    *Gate
	next http.RoundTripper
}

func (f fenced) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := WriteAllowed(f.g); err != nil {
			return nil, err
		}
	}
	return f.next.RoundTrip(req)
}
