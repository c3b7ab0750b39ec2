package kvstate

import (
	"context"
	"strings"
)

// Scoped is st seen through a key scope, so that several agents of one
// daemon keep their state apart in one bucket: with scope "" (the agent
// main, as before there were agents) the keys without a dot, which are all
// the keys [Key] and the scheduler's task ids make; with a scope s (an
// agent's name, [-_a-z0-9]) the keys "s.<key>", shown without "s.". Keys of
// other scopes are invisible: All leaves them out and Watch does not pass
// them on (its Synced change is passed on). A nil st gives nil.
func Scoped(st Store, scope string) Store {
	if st == nil {
		return nil
	}
	return scoped{st: st, prefix: scope + "."}
}

type scoped struct {
	st     Store
	prefix string // "." for main
}

// key is the bucket's key of the scope's key k.
func (s scoped) key(k string) string {
	if s.prefix == "." {
		return k
	}
	return s.prefix + k
}

// own returns the scope's key of the bucket's key k, false when k is
// another scope's.
func (s scoped) own(k string) (string, bool) {
	if s.prefix == "." {
		return k, !strings.Contains(k, ".")
	}
	rest, ok := strings.CutPrefix(k, s.prefix)
	return rest, ok && !strings.Contains(rest, ".")
}

func (s scoped) Get(ctx context.Context, key string) ([]byte, uint64, bool, error) {
	return s.st.Get(ctx, s.key(key))
}

func (s scoped) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.st.Put(ctx, s.key(key), value)
}

func (s scoped) Delete(ctx context.Context, key string) error { return s.st.Delete(ctx, s.key(key)) }

func (s scoped) Modify(ctx context.Context, key string, fn func(old []byte, ok bool) ([]byte, error)) ([]byte, uint64, error) {
	return s.st.Modify(ctx, s.key(key), fn)
}

func (s scoped) All(ctx context.Context) (map[string][]byte, error) {
	all, err := s.st.All(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(all))
	for k, v := range all {
		if own, ok := s.own(k); ok {
			out[own] = v
		}
	}
	return out, nil
}

func (s scoped) Watch(ctx context.Context, fn func(Change)) error {
	return s.st.Watch(ctx, func(c Change) {
		if c.Synced {
			fn(c)
			return
		}
		if own, ok := s.own(c.Key); ok {
			c.Key = own
			fn(c)
		}
	})
}
