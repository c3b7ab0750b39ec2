package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// schemaProps is the part of a tool's JSON Schema argument fixing needs.
type schemaProps struct {
	Properties map[string]struct {
		Type any `json:"type"` // a string, or a list of strings
	} `json:"properties"`
}

func (p schemaProps) typeOf(name string) string {
	switch t := p.Properties[name].Type.(type) {
	case string:
		return t
	case []any:
		for _, v := range t {
			if s, ok := v.(string); ok && s != "null" {
				return s
			}
		}
	}
	return ""
}

func normKey(s string) string {
	return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
}

// fixArgs maps argument names the model got wrong onto the schema's
// properties (declared aliases first, then case/underscore/hyphen-
// insensitive matches, then a unique property that the name ends or starts
// with, such as filePath → path), drops null values, and coerces obvious
// scalar mismatches ("3" for an integer, "true" for a boolean, 3 for a
// string). It returns the fixed arguments and one note per change; args
// that are not an object come back unchanged.
func fixArgs(schema json.RawMessage, aliases map[string]string, args json.RawMessage) (json.RawMessage, []string) {
	var in map[string]json.RawMessage
	if json.Unmarshal(args, &in) != nil || len(in) == 0 {
		return args, nil
	}
	var sp schemaProps
	_ = json.Unmarshal(schema, &sp)
	if len(sp.Properties) == 0 && len(aliases) == 0 {
		return args, nil
	}
	byNorm := map[string]string{}
	for p := range sp.Properties {
		byNorm[normKey(p)] = p
	}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]json.RawMessage, len(in))
	var notes []string
	for _, k := range keys {
		v := in[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			notes = append(notes, fmt.Sprintf("dropped null %q", k))
			continue
		}
		target := k
		if _, ok := sp.Properties[k]; !ok {
			if a, ok := aliases[k]; ok {
				target = a
			} else if p, ok := byNorm[normKey(k)]; ok {
				target = p
			} else if p := affixMatch(normKey(k), byNorm); p != "" {
				target = p
			}
		}
		if target != k {
			if _, taken := in[target]; taken {
				target = k // never overwrite an argument the model did send
			} else {
				notes = append(notes, fmt.Sprintf("renamed %q to %q", k, target))
			}
		}
		if nv, ok := coerce(sp.typeOf(target), v); ok {
			notes = append(notes, fmt.Sprintf("converted %q to %s", target, sp.typeOf(target)))
			v = nv
		}
		out[target] = v
	}
	if len(notes) == 0 {
		return args, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return args, nil
	}
	return b, notes
}

// affixMatch returns the one property whose normalised name the key ends
// or starts with (at least 3 characters), or "".
func affixMatch(key string, byNorm map[string]string) string {
	found := ""
	for n, p := range byNorm {
		if len(n) >= 3 && n != key && (strings.HasSuffix(key, n) || strings.HasPrefix(key, n)) {
			if found != "" {
				return "" // ambiguous
			}
			found = p
		}
	}
	return found
}

// coerce converts v to the schema type when the conversion is obvious.
func coerce(typ string, v json.RawMessage) (json.RawMessage, bool) {
	var s string
	isString := json.Unmarshal(v, &s) == nil
	switch typ {
	case "integer":
		if isString {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				return json.RawMessage(strconv.FormatInt(n, 10)), true
			}
		}
	case "number":
		if isString {
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), true
			}
		}
	case "boolean":
		if isString {
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "true":
				return json.RawMessage("true"), true
			case "false":
				return json.RawMessage("false"), true
			}
		}
	case "string":
		var f float64
		if !isString && json.Unmarshal(v, &f) == nil {
			b, _ := json.Marshal(string(bytes.TrimSpace(v)))
			return b, true
		}
		var bl bool
		if !isString && json.Unmarshal(v, &bl) == nil {
			b, _ := json.Marshal(strconv.FormatBool(bl))
			return b, true
		}
	}
	return nil, false
}
