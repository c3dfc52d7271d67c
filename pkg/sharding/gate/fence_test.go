package gate

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestFenceTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	g := New(func(string) (uint32, bool) { return 0, true })
	client := &http.Client{Transport: FenceTransport(g)(http.DefaultTransport)}

	tests := []struct {
		name     string
		deadline time.Time
		method   string
		wantErr  bool
	}{
		{name: "no lease yet, read", method: http.MethodGet},
		{name: "valid lease, write", deadline: time.Now().Add(time.Hour), method: http.MethodPost},
		{name: "expired lease, read", deadline: time.Now().Add(-time.Second), method: http.MethodGet},
		{name: "expired lease, write", deadline: time.Now().Add(-time.Second), method: http.MethodPatch, wantErr: true},
		{name: "expired lease, delete", deadline: time.Now().Add(-time.Second), method: http.MethodDelete, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g.SetDeadline(tc.deadline)
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			resp, err := client.Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			var fe ErrFenced
			if tc.wantErr != errors.As(err, &fe) {
				t.Fatalf("err = %v, want fenced error: %v", err, tc.wantErr)
			}
		})
	}
}
