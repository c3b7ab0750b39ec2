package slack

import (
	"container/list"
	"sync"
)

// lru is a bounded map from string keys to values that forgets the least
// recently added or touched key first. It is safe for concurrent use.
type lru[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recent; elements hold *lruEntry[V]
	m     map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), m: make(map[string]*list.Element)}
}

// get returns the value of key and marks it recently used.
func (l *lru[V]) get(key string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok {
		l.order.MoveToFront(e)
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

// put sets key to val, evicting the oldest key when full.
func (l *lru[V]) put(key string, val V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putLocked(key, val)
}

func (l *lru[V]) putLocked(key string, val V) {
	if e, ok := l.m[key]; ok {
		e.Value.(*lruEntry[V]).val = val
		l.order.MoveToFront(e)
		return
	}
	l.m[key] = l.order.PushFront(&lruEntry[V]{key: key, val: val})
	for l.order.Len() > l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.m, old.Value.(*lruEntry[V]).key)
	}
}

// add puts key with val unless it is present, and reports whether it was
// added.
func (l *lru[V]) add(key string, val V) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[key]; ok {
		return false
	}
	l.putLocked(key, val)
	return true
}

// remove forgets key.
func (l *lru[V]) remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[key]; ok {
		l.order.Remove(e)
		delete(l.m, key)
	}
}

// len returns the number of keys.
func (l *lru[V]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}
