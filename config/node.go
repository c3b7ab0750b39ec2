package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Node is a part of the file kept undecoded: a field of type Node takes the
// value under its key as it is (environment references already expanded),
// for the program to decode later with [Node.Decode] onto values it
// computes, e.g. one section's overrides onto defaults inherited from
// another section. Keys lists no keys under a Node. The zero Node is a key
// left out (or null).
type Node struct {
	node *yaml.Node
	path string
}

var nodeType = reflect.TypeFor[Node]()

// IsZero reports whether the key was left out or null.
func (n Node) IsZero() bool { return n.node == nil || isNull(n.node) }

// Path is the node's dotted key path in the file.
func (n Node) Path() string { return n.path }

// Decode decodes the node into v (a non-nil pointer) over its current
// values, with the rules of [Decode] (strict keys, defaults kept, every
// problem reported); problems name the node's full path in the file, such
// as "agents.work.llm.model (line 12): ...". Validate is not run. The zero
// Node leaves v as it is.
func (n Node) Decode(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("config: Node.Decode needs a non-nil pointer, got %T", v)
	}
	if n.IsZero() {
		return nil
	}
	var d decoder
	d.decode(n.node, rv.Elem(), n.path)
	slices.SortStableFunc(d.problems, func(a, b *KeyError) int { return cmp.Compare(a.Line, b.Line) })
	problems := make([]error, 0, len(d.problems))
	for _, p := range d.problems {
		problems = append(problems, p)
	}
	return errors.Join(problems...)
}
