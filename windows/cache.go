package windows

import (
	"errors"
	"fmt"
)

// Backend stores encoded slot state outside memory. state.Pebble is the real
// one; MemBackend is its in-memory twin for tests.
type Backend interface {
	// Get returns the value stored under key; it is valid until the next
	// call on the Backend.
	Get(key []byte) (value []byte, found bool, err error)
	// Set stores value under key; the Backend may batch writes, but a Get
	// must see them.
	Set(key, value []byte) error
	// Delete removes key.
	Delete(key []byte) error
}

// cache is the write-back cache of decoded slots in front of the Backend:
// a slot is encoded and written when evicted or flushed, not per event. It
// is an LRU list threaded through the slots.
type cache struct {
	m       map[string]*slot
	lru     slot // sentinel: lru.next is the most recently used
	cap     int
	backend Backend
	specs   []*spec
	buf     []byte
}

func newCache(capacity int, backend Backend, specs []*spec) *cache {
	c := &cache{m: make(map[string]*slot), cap: capacity, backend: backend, specs: specs}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// get returns the slot for key, loading it from the Backend, or creating it
// when create is set; nil when it does not exist.
func (c *cache) get(key []byte, create bool) (*slot, error) {
	if s, ok := c.m[string(key)]; ok {
		c.touch(s)
		return s, nil
	}
	return c.load(string(key), create)
}

// lookup is get for a key held as a string, never creating.
func (c *cache) lookup(key string) (*slot, error) {
	if s, ok := c.m[key]; ok {
		c.touch(s)
		return s, nil
	}
	return c.load(key, false)
}

func (c *cache) load(key string, create bool) (*slot, error) {
	if len(key) < 2 || int(key[0])<<8|int(key[1]) >= len(c.specs) {
		return nil, fmt.Errorf("windows: slot key %q names no rule", key)
	}
	sp := c.specs[int(key[0])<<8|int(key[1])]
	val, found, err := c.backend.Get([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("windows: load state: %w", err)
	}
	var s *slot
	switch {
	case found:
		if s, err = decodeSlot(key, sp, val); err != nil {
			return nil, err
		}
		s.persisted = true
	case create:
		s = newSlot(key, sp)
	default:
		return nil, nil
	}
	c.m[key] = s
	c.link(s)
	for len(c.m) > c.cap {
		if err := c.evict(c.lru.prev); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (c *cache) link(s *slot) {
	s.prev, s.next = &c.lru, c.lru.next
	s.next.prev, c.lru.next = s, s
}

func (c *cache) unlink(s *slot) {
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
}

func (c *cache) touch(s *slot) {
	if c.lru.next != s {
		c.unlink(s)
		c.link(s)
	}
}

// evict writes s back if it changed and drops it from memory.
func (c *cache) evict(s *slot) error {
	if err := c.writeBack(s); err != nil {
		return err
	}
	if _, ok := c.m[s.key]; ok { // writeBack removes empty slots itself
		delete(c.m, s.key)
		c.unlink(s)
	}
	return nil
}

func (c *cache) writeBack(s *slot) error {
	if !s.dirty {
		return nil
	}
	if s.empty() {
		return c.remove(s)
	}
	c.buf = encodeSlot(c.buf[:0], s)
	if err := c.backend.Set([]byte(s.key), c.buf); err != nil {
		return fmt.Errorf("windows: write state: %w", err)
	}
	s.dirty, s.persisted = false, true
	return nil
}

// remove forgets a slot whose windows are all purged.
func (c *cache) remove(s *slot) error {
	if _, ok := c.m[s.key]; ok {
		delete(c.m, s.key)
		c.unlink(s)
	}
	if s.persisted {
		if err := c.backend.Delete([]byte(s.key)); err != nil {
			return fmt.Errorf("windows: delete state: %w", err)
		}
		s.persisted = false
	}
	s.dirty = false
	return nil
}

// flush writes back every changed slot, keeping them cached.
func (c *cache) flush() error {
	var errs []error
	for s := c.lru.next; s != &c.lru; {
		next := s.next
		if err := c.writeBack(s); err != nil {
			errs = append(errs, err)
		}
		s = next
	}
	return errors.Join(errs...)
}

// MemBackend is an in-memory Backend, the twin of the Pebble one in tests.
type MemBackend struct {
	m map[string][]byte
}

// NewMemBackend returns an empty MemBackend.
func NewMemBackend() *MemBackend { return &MemBackend{m: make(map[string][]byte)} }

// Get implements Backend.
func (b *MemBackend) Get(key []byte) ([]byte, bool, error) {
	v, ok := b.m[string(key)]
	return v, ok, nil
}

// Set implements Backend.
func (b *MemBackend) Set(key, value []byte) error {
	b.m[string(key)] = append([]byte(nil), value...)
	return nil
}

// Delete implements Backend.
func (b *MemBackend) Delete(key []byte) error {
	delete(b.m, string(key))
	return nil
}

// Len is the number of keys stored.
func (b *MemBackend) Len() int { return len(b.m) }
