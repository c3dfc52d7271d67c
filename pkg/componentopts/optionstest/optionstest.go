package optionstest

import (
	"strings"
	"testing"
)

// CheckErrors fails t unless err is nil when want is empty, or otherwise an error whose
// text contains every string of want (Validate reports every bad flag at once).
func CheckErrors(t testing.TB, err error, want ...string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want errors containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q\nwant it to contain %q", err, w)
		}
	}
}
