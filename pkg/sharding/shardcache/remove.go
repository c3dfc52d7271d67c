package shardcache

// Removing an informer whose resource the API server no longer serves (a CRD deleted, an
// aggregated API unregistered), for the controllers that act on every served resource. It
// keeps:
//   - The Namespace informer, which partitions are made of, is never removed.
//   - A removed informer is stopped and forgotten: Informer(key) afterwards builds a new
//     one, filled by its own first list, as for any informer created after the start.
//   - Nothing waits for a removed feed: its warm-ups in progress count as done, and
//     Prepare, Refresh and readiness no longer include it.
//   - Its store is left as it was: whoever holds the informer must drop it.

import "fmt"

// Remove stops the informer of key and forgets it. It is an error to remove the
// Namespace informer; removing a key the Cache does not have is not.
func (c *Cache) Remove(key Key) error {
	if key == namespacesType.Key() {
		return fmt.Errorf("shardcache: the Namespace informer cannot be removed")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.health, key)
	if stop := c.stops[key]; stop != nil {
		stop()
		delete(c.stops, key)
	}
	if f := c.feeds[key]; f != nil {
		delete(c.feeds, key)
		for i, o := range c.order {
			if o == f {
				c.order = append(c.order[:i:i], c.order[i+1:]...)
				break
			}
		}
		f.remove()
		return nil
	}
	if c.plain[key] != nil {
		delete(c.plain, key)
		for i, p := range c.plainOrder {
			if p.key == key {
				c.plainOrder = append(c.plainOrder[:i:i], c.plainOrder[i+1:]...)
				break
			}
		}
	}
	return nil
}
