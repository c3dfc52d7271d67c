package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGetBoundsTheAnswer: the assignments subcommand reads at most maxAnswerBytes, so a
// wrong --server cannot make it buffer without bound.
func TestGetBoundsTheAnswer(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		status  int
		wantErr string
	}{
		{name: "normal answer", size: 1 << 10, status: http.StatusOK},
		{name: "exactly the limit", size: maxAnswerBytes, status: http.StatusOK},
		{name: "over the limit", size: maxAnswerBytes + 1, status: http.StatusOK, wantErr: "larger than"},
		{name: "error status", size: 10, status: http.StatusServiceUnavailable, wantErr: "503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(strings.Repeat("x", tt.size)))
			}))
			defer srv.Close()
			body, err := get(srv.URL + "/assignments")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("get() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(body) != tt.size {
				t.Fatalf("get() = %d bytes, %v; want %d bytes", len(body), err, tt.size)
			}
		})
	}
}
