package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envNameRE matches the NAME in ${NAME} and ${NAME:-default}.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandTree replaces environment references in the scalar values under
// root, in place, and returns the problems with the keys they occur under.
func expandTree(root *yaml.Node, lookup func(string) (string, bool)) []*KeyError {
	ex := expander{lookup: lookup, seen: make(map[*yaml.Node]bool)}
	ex.walk(root, "")
	return ex.problems
}

// expander replaces environment references in scalar values, recording
// problems with the key they occur under.
type expander struct {
	lookup   func(string) (string, bool)
	seen     map[*yaml.Node]bool // each node expanded once, even if aliased
	problems []*KeyError
}

func (e *expander) walk(n *yaml.Node, path string) {
	if e.seen[n] {
		return
	}
	e.seen[n] = true
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			e.walk(n.Content[i+1], joinPath(path, n.Content[i].Value))
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			e.walk(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return
		}
		v, err := expandEnv(n.Value, e.lookup)
		if err != nil {
			e.problems = append(e.problems, newProblem(path, n, "%w", err))
			return
		}
		n.Value = v
		if n.Style == 0 {
			// Plain scalar: let the new text resolve its own type (int,
			// bool, null for empty) as if it had been written in the file.
			n.Tag = ""
		}
	}
}

// expandEnv expands ${NAME}, ${NAME:-default} and $$ in s. A $ followed by
// anything else is kept as is.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q (write $$ for a literal $)", s)
			}
			ref := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(ref, ":-")
			if !envNameRE.MatchString(name) {
				return "", fmt.Errorf("invalid environment variable reference ${%s}: want ${NAME} or ${NAME:-default} with NAME of letters, digits and _ (write $$ for a literal $)", ref)
			}
			val, ok := lookup(name)
			if hasDef && (!ok || val == "") {
				val = def
			}
			b.WriteString(val)
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), nil
}
