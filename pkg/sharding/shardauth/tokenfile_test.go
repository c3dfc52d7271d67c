package shardauth

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestTokenFileRereads: every session reads the file again, so a token the kubelet
// rotated is the one sent.
func TestTokenFileRereads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	tf := TokenFile{Path: path}
	if _, err := tf.GetRequestMetadata(context.Background()); err == nil {
		t.Error("a missing token file gave metadata")
	}
	for _, tc := range []struct{ name, content, want string }{
		{name: "first token", content: "tok-1\n", want: "Bearer tok-1"},
		{name: "rotated", content: "tok-2", want: "Bearer tok-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			md, err := tf.GetRequestMetadata(context.Background())
			if err != nil || md[MetadataKey] != tc.want {
				t.Errorf("metadata %v, %v; want %s: %q", md, err, MetadataKey, tc.want)
			}
		})
	}
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tf.GetRequestMetadata(context.Background()); err == nil {
		t.Error("an empty token file gave metadata")
	}
	if !tf.RequireTransportSecurity() || (TokenFile{AllowInsecure: true}).RequireTransportSecurity() {
		t.Error("RequireTransportSecurity must hold unless AllowInsecure")
	}
}
