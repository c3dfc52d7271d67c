package expectations

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestExpectCreationsAndDeletions(t *testing.T) {
	tests := []struct {
		name      string
		adds      int
		dels      []string
		observe   func(e *Expectations)
		satisfied bool
	}{
		{name: "nothing expected", satisfied: true},
		{name: "creations pending", adds: 2, observe: func(e *Expectations) { e.CreationObserved("k") }},
		{name: "creations observed", adds: 1, observe: func(e *Expectations) { e.CreationObserved("k") }, satisfied: true},
		{name: "deletion pending", adds: 1, dels: []string{"ns/a"}, observe: func(e *Expectations) { e.CreationObserved("k") }},
		{name: "both observed", adds: 1, dels: []string{"ns/a"}, satisfied: true, observe: func(e *Expectations) {
			e.CreationObserved("k")
			e.DeletionOfObserved("k", "ns/a")
		}},
		{name: "another object's deletion does not count", dels: []string{"ns/a"}, observe: func(e *Expectations) {
			e.DeletionOfObserved("k", "ns/b")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(clocktesting.NewFakeClock(time.Unix(0, 0)))
			e.Expect("k", tt.adds, tt.dels)
			if tt.observe != nil {
				tt.observe(e)
			}
			if got := e.Satisfied("k"); got != tt.satisfied {
				t.Errorf("Satisfied = %v, want %v", got, tt.satisfied)
			}
		})
	}
}
