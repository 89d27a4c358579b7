package pagecache

import (
	"context"
)

// What a node of a cluster serves its peers from (package peer's Holder):
// the pages it owns, kept in its slots and tiers, so that a page is held
// once on the node and a node with a disk tier can own more pages than
// its RAM holds.

// ReadHeld copies bytes [off, off+len(b)) of absolute page p to b if the
// cache holds the page, in a slot or a tier, and reports whether it did.
// It reads no storage and counts no read of the cache's consumers.
func (c *Cache) ReadHeld(p, off int64, b []byte) bool {
	dp := p - c.firstPage
	if dp < 0 || dp >= int64(len(c.pageSlot)) || off < 0 || off+int64(len(b)) > c.pageSize {
		return false
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if si := c.pageSlot[dp]; si >= 0 && c.slots[si].ready {
		pg := c.pin(si, -1)
		copy(b, pg.Data[off:])
		pg.Release()
		return true
	}
	c.mu.Unlock()
	if c.tiers == nil {
		return false
	}
	for _, s := range c.tiers.stores {
		if s.Read(int32(dp), off, b) {
			return true
		}
	}
	return false
}

// Keep offers absolute page p, read whole from storage by the caller, to
// the tiers, waiting while their queues are full until ctx ends: a page
// the node keeps for its cluster is not read from storage again for want
// of a place in a queue. The caller gives b up: the tiers read it until
// they have stored it.
func (c *Cache) Keep(ctx context.Context, p int64, b []byte) {
	dp := p - c.firstPage
	if c.tiers == nil || dp < 0 || dp >= int64(len(c.pageSlot)) || int64(len(b)) != c.pageSize {
		return
	}
	for _, s := range c.tiers.stores {
		s.PutWait(ctx, int32(dp), b, func() {})
	}
}

// KeepFirst makes the tiers keep the pages for which keep is true before
// any other (the pages this node owns for its cluster): such a page
// displaces any other, however far its next use, and goes only when no
// other is left and keep no longer names it.
func (c *Cache) KeepFirst(keep func(p int64) bool) {
	if c.tiers == nil {
		return
	}
	for _, s := range c.tiers.stores {
		s.SetKeep(func(dp int32) bool { return keep(int64(dp) + c.firstPage) })
	}
}
