package framework

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPoll checks Poll's contract, which its callers' failure messages rest on: nil once
// cond is true without an error; after the timeout an error naming cond's last error; a
// poll that errs is not done even when it returns true.
func TestPoll(t *testing.T) {
	tests := []struct {
		name    string
		results []bool  // cond's answer at each call; the last one repeats
		errs    []error // cond's error at each call; the last one repeats
		wantErr string  // "" for success, else a part of Poll's error
	}{
		{name: "true at once", results: []bool{true}, errs: []error{nil}},
		{name: "true at the third call", results: []bool{false, false, true}, errs: []error{errors.New("1 left"), errors.New("1 left"), nil}},
		{name: "never true: the last error", results: []bool{false}, errs: []error{errors.New("first"), errors.New("3 Services left")},
			wantErr: "not true after 500ms (last error: 3 Services left)"},
		{name: "never true, no error", results: []bool{false}, errs: []error{nil}, wantErr: "not true after 500ms (last error: <nil>)"},
		{name: "true with an error is not done", results: []bool{true}, errs: []error{errors.New("0 left, but")},
			wantErr: "(last error: 0 left, but)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A success must come long before its timeout, on a loaded machine too; a
			// failure is waited for in full.
			timeout := 30 * time.Second
			if tc.wantErr != "" {
				timeout = 500 * time.Millisecond
			}
			calls := 0
			err := Poll(timeout, func(ctx context.Context) (bool, error) {
				if _, ok := ctx.Deadline(); !ok {
					t.Error("cond's context has no deadline")
				}
				i := calls
				calls++
				return tc.results[min(i, len(tc.results)-1)], tc.errs[min(i, len(tc.errs)-1)]
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Poll: %v, want nil after %d calls", err, calls)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Poll: %v, want an error with %q", err, tc.wantErr)
			}
			if want := len(tc.results); tc.wantErr == "" && calls != want {
				t.Errorf("cond called %d times, want %d (Poll returns at the first true)", calls, want)
			}
		})
	}
}

// TestPollKeepsTheErrorBeforeTheTimeout: an attempt the timeout cuts short fails only
// because of it; the error that says why the condition was false is the one before.
func TestPollKeepsTheErrorBeforeTheTimeout(t *testing.T) {
	calls := 0
	err := Poll(500*time.Millisecond, func(ctx context.Context) (bool, error) {
		calls++
		if calls < 3 {
			return false, errors.New("sum(up) = 5, want ≥ 6")
		}
		<-ctx.Done()
		return false, ctx.Err()
	})
	if want := "(last error: sum(up) = 5, want ≥ 6)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Poll: %v, want an error with %q", err, want)
	}
}
