package handoff

import (
	"fmt"
	"maps"
	"slices"
)

// WaitIndexErr says how the saturation rule's wait index differs from the members it
// was built from, unless it was dropped (invalidate): a change of who counts toward the
// median that did not invalidate it. For the fuzz tests of package handoff_test.
func (c *Coordinator) WaitIndexErr() error {
	x := c.bal.waits
	if x.sorted == nil {
		return nil
	}
	var fresh waitIndex
	fresh.rebuild(c.members)
	if !maps.Equal(x.of, fresh.of) {
		return fmt.Errorf("wait index holds %v, the members %v", x.of, fresh.of)
	}
	if len(x.sorted) != len(fresh.sorted) {
		return fmt.Errorf("wait index holds groups %v, the members %v", x.sorted, fresh.sorted)
	}
	for g, w := range fresh.sorted {
		if !slices.Equal(x.sorted[g], w) {
			return fmt.Errorf("wait index of group %q holds %v, the members %v", g, x.sorted[g], w)
		}
	}
	return nil
}
