package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// parseDocument parses data as one YAML document and returns its top-level
// mapping, or nil for an empty document. topLevel describes the mapping
// wanted (Options.TopLevel).
func parseDocument(data []byte, topLevel string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, fmt.Errorf("line %d: the file must hold one YAML document, found a second one", extra.Line)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		if topLevel == "" {
			topLevel = "a mapping of keys"
		}
		return nil, fmt.Errorf("line %d: the top level must be %s, got %s", root.Line, topLevel, describeNode(root))
	}
	return root, nil
}

// newProblem is a problem with the key at path, found at node n.
func newProblem(path string, n *yaml.Node, format string, args ...any) *KeyError {
	return &KeyError{Path: path, Line: n.Line, Column: n.Column, Err: fmt.Errorf(format, args...)}
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	unmarshalerT  = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshal = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether values of t decode themselves, with
// UnmarshalYAML or UnmarshalText: they are leaves, whatever their kind.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(unmarshalerT) || p.Implements(textUnmarshal)
}

// decodeTree decodes root into v (settable) and returns every problem.
func decodeTree(root *yaml.Node, v reflect.Value) []*KeyError {
	var d decoder
	d.decode(root, v, "")
	return d.problems
}

// decoder decodes a YAML node tree into a Go value strictly, collecting
// every problem with its dotted key path and line instead of stopping at
// the first.
type decoder struct {
	problems []*KeyError
	depth    int
}

func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.problems = append(d.problems, newProblem(path, n, format, args...))
}

// decode stores n into v (which must be settable). Structs decode key by
// key over their current (default) values; a null node leaves a struct as
// it is and sets any other value to its zero value.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 100 {
		d.fail(path, n, "nested too deeply (alias loop?)")
		return
	}
	if n.Kind == yaml.AliasNode {
		d.decode(n.Alias, v, path)
		return
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(Node{node: n, path: path}))
		return
	}
	if v.Kind() != reflect.Pointer && decodesItself(v.Type()) {
		d.leaf(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Pointer:
		if isNull(n) {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Slice:
		if isNull(n) {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(path, n, "must be a list, got %s", describeNode(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if isNull(n) {
			v.SetZero()
			return
		}
		if n.Kind != yaml.MappingNode || v.Type().Key().Kind() != reflect.String {
			d.fail(path, n, "must be a mapping, got %s", describeNode(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(n.Content[i+1], elem, joinPath(path, k.Value))
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
		}
		v.Set(m)
	default:
		d.leaf(n, v, path)
	}
}

// structure decodes a mapping into struct v field by field.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping of keys, got %s", describeNode(n))
		return
	}
	fields := yamlFields(v.Type())
	// Merge keys (<<: *anchor) apply first so the mapping's own keys win.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			val := n.Content[i+1]
			if val.Kind == yaml.SequenceNode {
				for _, m := range val.Content {
					d.structure(resolveAlias(m), v, path)
				}
			} else {
				d.structure(resolveAlias(val), v, path)
			}
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(path, k, "keys must be plain names, got %s", describeNode(k))
			continue
		}
		idx, ok := fields[k.Value]
		if !ok {
			msg := "unknown key"
			if s := suggest(k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			d.fail(joinPath(path, k.Value), k, "%s", msg)
			continue
		}
		d.decode(val, v.FieldByIndex(idx), joinPath(path, k.Value))
	}
}

// leaf decodes a scalar (or a type with its own YAML or text decoding).
func (d *decoder) leaf(n *yaml.Node, v reflect.Value, path string) {
	custom := reflect.PointerTo(v.Type()).Implements(unmarshalerT)
	if !custom && n.Kind != yaml.ScalarNode {
		d.fail(path, n, "must be %s, got %s", describeType(v.Type()), describeNode(n))
		return
	}
	if !custom && isNull(n) {
		v.SetZero()
		return
	}
	if isInteger(v.Kind()) && n.ShortTag() == "!!float" {
		// yaml would truncate 1.5 to 1 without a word.
		d.fail(path, n, "must be %s, got %q", describeType(v.Type()), n.Value)
		return
	}
	tmp := reflect.New(v.Type())
	if err := n.Decode(tmp.Interface()); err != nil {
		if custom || reflect.PointerTo(v.Type()).Implements(textUnmarshal) {
			d.fail(path, n, "invalid value %q: %w", n.Value, err)
		} else {
			d.fail(path, n, "must be %s, got %q", describeType(v.Type()), n.Value)
		}
		return
	}
	v.Set(tmp.Elem())
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// yamlFields maps each YAML key of struct type t to its field index,
// following yaml tags (",inline" structs contribute their keys).
func yamlFields(t reflect.Type) map[string][]int {
	out := make(map[string][]int)
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		inline := strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct
		if name == "-" || (!f.IsExported() && !(inline && f.Anonymous)) {
			continue
		}
		if inline {
			for k, idx := range yamlFields(f.Type) {
				out[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = []int{i}
	}
	return out
}

// suggest returns the known key closest to an unknown one when it is a
// likely typo (edit distance at most 2), else "".
func suggest(key string, fields map[string][]int) string {
	best, bestDist := "", 3
	for k := range fields {
		if dist := editDistance(key, k); dist < bestDist || (dist == bestDist && k < best) {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolveAlias(n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describeNode(n *yaml.Node) string {
	switch resolveAlias(n).Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("the value %q", n.Value)
	}
}

func describeType(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 90s, 10m or 1h30m"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.String()
}
