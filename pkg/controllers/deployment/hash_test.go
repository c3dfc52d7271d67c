package deployment

import (
	"strings"
	"testing"
)

func TestReplicaSetName(t *testing.T) {
	long := strings.Repeat("a", 260)
	tests := []struct {
		name, deployment, hash, want string
	}{
		{name: "short", deployment: "web", hash: "5c45b89c8d", want: "web-5c45b89c8d"},
		{name: "exactly fits", deployment: long[:242], hash: "5c45b89c8d", want: long[:242] + "-5c45b89c8d"},
		{name: "truncated", deployment: long, hash: "5c45b89c8d", want: long[:242] + "-5c45b89c8d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := replicaSetName(tt.deployment, tt.hash)
			if got != tt.want {
				t.Errorf("replicaSetName = %q, want %q", got, tt.want)
			}
			if len(got) > 253 {
				t.Errorf("name has %d characters", len(got))
			}
		})
	}
}
