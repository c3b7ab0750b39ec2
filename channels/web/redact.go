package web

import (
	"encoding"
	"reflect"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// redacted replaces a secret's value.
const redacted = "(redacted)"

// secretSuffixes mark a configuration key whose value is a secret
// (llm.api_key, channels.telegram.token, channels.openai.keys,
// bus.admin.password, nkey seeds, …). Counts and limits (max_tokens) are
// not secrets.
var secretSuffixes = []string{"key", "keys", "token", "password", "secret", "seed", "credentials", "nkey"}

func secretKey(name string) bool {
	name = strings.ToLower(name) // env names: GITHUB_PERSONAL_ACCESS_TOKEN
	for _, s := range secretSuffixes {
		if name == s || strings.HasSuffix(name, "_"+s) {
			return true
		}
	}
	return false
}

// RedactConfig returns a configuration value (a struct with yaml tags) as
// a tree of maps, lists and scalars keyed by its YAML keys, for display:
// a section that knows its own secrets (a type with a method Redacted
// returning its own type, such as mcp.Config, which hides every env and
// header value and the URL's userinfo and query values) is shown as that
// method returns it; every non-empty value of a secret key (any case) is
// replaced with "(redacted)", credentials in URLs are hidden
// (bus.RedactURL), and durations are written as Go durations ("30s").
func RedactConfig(v any) any { return redactValue(reflect.ValueOf(v), "") }

func redactValue(v reflect.Value, name string) any {
	if !v.IsValid() {
		return nil
	}
	if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		return redactValue(v.Elem(), name)
	}
	return redactWalk(selfRedacted(v), name)
}

// selfRedacted returns what v's method Redacted returns when it has one
// that takes nothing and returns v's own type; v otherwise.
func selfRedacted(v reflect.Value) reflect.Value {
	m := v.MethodByName("Redacted")
	if !m.IsValid() {
		return v
	}
	if t := m.Type(); t.NumIn() != 0 || t.NumOut() != 1 || t.Out(0) != v.Type() {
		return v
	}
	return m.Call(nil)[0]
}

func redactWalk(v reflect.Value, name string) any {
	if secretKey(name) {
		if v.IsZero() || (v.Kind() == reflect.Slice && v.Len() == 0) {
			return emptyOf(v)
		}
		return redacted
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok && v.Kind() != reflect.Struct {
		b, _ := m.MarshalText()
		return string(b)
	}
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := strings.Split(f.Tag.Get("yaml"), ",")
			key := tag[0]
			if key == "-" {
				continue
			}
			if key == "" {
				key = strings.ToLower(f.Name)
			}
			val := redactValue(v.Field(i), key)
			if len(tag) > 1 && tag[1] == "inline" {
				if m, ok := val.(map[string]any); ok {
					for k, x := range m {
						out[k] = x
					}
					continue
				}
			}
			out[key] = val
		}
		return out
	case reflect.Slice, reflect.Array:
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = redactValue(v.Index(i), name)
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			ks := k.String()
			out[ks] = redactValue(v.MapIndex(k), ks)
		}
		return out
	case reflect.String:
		s := v.String()
		if strings.Contains(s, "://") && strings.Contains(s, "@") {
			return bus.RedactURL(s)
		}
		return s
	default:
		return v.Interface()
	}
}

func emptyOf(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return []any{}
	case reflect.String:
		return ""
	}
	return v.Interface()
}
