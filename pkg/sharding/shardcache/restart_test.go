package shardcache

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestExpiredContinueBacksOff: a paged warm-up list whose continue token expires (410
// Gone) is restarted from its first page only after a backoff, and after the backoff's
// steps the 410 is returned to the caller's own retry instead of restarting at once,
// forever.
func TestExpiredContinueBacksOff(t *testing.T) {
	const first = 20 * time.Millisecond
	tests := []struct {
		name        string
		expire      int // continue pages answered 410 before the token is honoured; -1 always
		wantCalls   int
		wantErr     bool
		wantAtLeast time.Duration // the backoff the restarts waited in all
	}{
		{name: "the token keeps expiring", expire: -1, wantCalls: 6, wantErr: true, wantAtLeast: first + 2*first},
		{name: "expires once, then the list completes", expire: 1, wantCalls: 4, wantAtLeast: first},
		{name: "never expires", expire: 0, wantCalls: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, api := newTestFeed(t, 1)
			f.restartBackoff = wait.Backoff{Duration: first, Factor: 2, Steps: 3}
			api.setList("p1-a", 10, cm("p1-a", "x", 5))
			api.setList("p1-a|next", 10, cm("p1-a", "y", 6))
			api.mu.Lock()
			api.lists["p1-a"].Continue = "next"
			expired := 0
			api.failList = func(_ string, opts metav1.ListOptions) error {
				switch {
				case len(api.listCalls) > 50:
					return errors.New("still listing: the restarts do not end")
				case opts.Continue != "" && (tc.expire < 0 || expired < tc.expire):
					expired++
					return apierrors.NewResourceExpired("the provided continue parameter is too old")
				}
				return nil
			}
			api.mu.Unlock()

			start := time.Now()
			items, _, err := f.listNamespace(context.Background(), "p1-a", 1)
			took := time.Since(start)
			api.mu.Lock()
			calls := len(api.listCalls)
			api.mu.Unlock()
			if calls != tc.wantCalls {
				t.Errorf("%d list calls, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr {
				if !apierrors.IsResourceExpired(err) {
					t.Errorf("listNamespace = %v, want the 410 after the backoff's steps", err)
				}
			} else if err != nil || len(items) != 2 {
				t.Errorf("listNamespace = %d items, %v; want both pages' 2", len(items), err)
			}
			if took < tc.wantAtLeast {
				t.Errorf("the restarts took %s, want at least %s of backoff", took, tc.wantAtLeast)
			}
		})
	}
}
