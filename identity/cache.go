package identity

import (
	"container/list"
	"sync"
	"time"
)

// credKey is the cache key of a credential: its SHA-256, so raw tokens are
// never kept.
type credKey [32]byte

// identityEntry is one cached lookup: a caller, or anonymous (ok false).
type identityEntry struct {
	key     credKey
	caller  Caller
	ok      bool
	expires time.Time
}

// identityCache is a bounded LRU of lookups, expired lazily on read. Safe
// for concurrent use.
type identityCache struct {
	size int

	mu    sync.Mutex
	ll    *list.List                // front: most recently used; requires mu held
	items map[credKey]*list.Element // requires mu held
}

func newIdentityCache(size int) *identityCache {
	return &identityCache{size: size, ll: list.New(), items: make(map[credKey]*list.Element)}
}

// get returns the unexpired entry for k.
func (c *identityCache) get(k credKey, now time.Time) (identityEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return identityEntry{}, false
	}
	e := el.Value.(*identityEntry)
	if !now.Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, k)
		return identityEntry{}, false
	}
	c.ll.MoveToFront(el)
	return *e, true
}

// put stores e, evicting the least recently used entry when full.
func (c *identityCache) put(e identityEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.key]; ok {
		*el.Value.(*identityEntry) = e
		c.ll.MoveToFront(el)
		return
	}
	c.items[e.key] = c.ll.PushFront(&e)
	for c.ll.Len() > c.size {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*identityEntry).key)
	}
}

// len returns the number of entries, expired or not.
func (c *identityCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
