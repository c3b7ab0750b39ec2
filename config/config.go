// Package config reads a YAML configuration file strictly into a Go struct
// and reports every problem in it at once. It knows nothing of the program
// it configures: the struct's yaml tags are the whole schema, and each
// section's own Validate method holds its rules.
//
// # How the file is read
//
//  1. The file is parsed as exactly one YAML document whose top level is a
//     mapping (an empty file is an empty mapping). A syntax error, a second
//     document or a top level that is not a mapping stops here: the error is
//     that one problem and nothing is decoded.
//  2. Environment references in scalar values are replaced: ${NAME} with the
//     variable's value (empty when unset), ${NAME:-default} with "default"
//     when NAME is unset or empty, and $$ with a literal $. NAME is letters,
//     digits and _, not starting with a digit; any other ${...}, or a ${
//     without its }, is a problem of the key it is under. A $ followed by
//     anything else is kept as is, and values from the environment are not
//     expanded again. Keys and comments are never expanded. Expansion
//     happens after parsing, so a value cannot change the file's structure;
//     an unquoted value that expands to a number or boolean is decoded as
//     one, a quoted one stays a string, and an empty one is null.
//  3. The tree is decoded into the target over its current values, which are
//     therefore the defaults: a key left out keeps its value, a key present
//     with an empty value (null) sets the zero value, and a struct section
//     present with no keys keeps its defaults (a pointer to a struct set to
//     null is nil; {} keeps or allocates it). Keys follow the yaml tags
//     (",inline" structs contribute their keys; an untagged field's key is
//     its lower-cased name; "-" and unexported fields are not keys). Every key
//     must be known: an unknown key is a problem, with "did you mean ...?"
//     when a known key is within two edits. A value of the wrong type is a
//     problem naming the type wanted: an integer (1.5 is not truncated), true
//     or false, a duration in Go syntax (90s, 10m, 1h30m), a list, a
//     mapping. Types with their own UnmarshalYAML or UnmarshalText decode
//     themselves; their error is reported as "invalid value". Anchors,
//     aliases and merge keys (<<: *anchor, the mapping's own keys winning)
//     work; an alias loop is a problem, not a hang. A field of type [Node]
//     keeps its part of the tree undecoded, for a later [Node.Decode].
//  4. When the target implements [Validator], its Validate runs on the
//     decoded value, even after decoding problems (a key that failed to
//     decode keeps its default, so it adds no noise of its own).
//
// Every problem is reported: the error is an [errors.Join] of one error per
// problem, the decoding problems first in file order, then the ones from
// Validate in its order. A decoding problem is a [*KeyError] and reads
// "dotted.path[0].key (line N): what is wrong"; [Problems] splits the error
// into its parts, one per line of its text.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"sort"
)

// Validator is a decoded value that checks its own rules. Validate reports
// every problem (an errors.Join of them, each naming its key) or nil.
type Validator interface {
	Validate() error
}

// Options tune a decoding. The zero value reads from an empty environment.
type Options struct {
	// LookupEnv resolves ${NAME} references (os.LookupEnv for the process
	// environment); nil behaves as an empty environment.
	LookupEnv func(string) (string, bool)
	// TopLevel describes what the top level must be, for the problem
	// reported when it is not a mapping: "line 1: the top level must be
	// <TopLevel>, got a list". Empty means "a mapping of keys".
	TopLevel string
}

// KeyError is one problem with one key of the file: a key that is unknown,
// a value that does not decode into the key's type, or an environment
// reference that cannot be expanded.
type KeyError struct {
	// Path is the dotted key path (list elements as [i]); empty for the
	// top level.
	Path string
	// Line and Column locate the key or value in the file, from 1.
	Line, Column int
	// Err says what is wrong.
	Err error
}

// Error reads "path (line N): what is wrong".
func (e *KeyError) Error() string {
	path := e.Path
	if path == "" {
		path = "top level"
	}
	return fmt.Sprintf("%s (line %d): %v", path, e.Line, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// Decode reads data as described in the package documentation into v, which
// must be a non-nil pointer (usually to a struct holding the defaults), and
// then runs v's Validate when it implements [Validator]. It returns nil or
// every problem found; v may be partly updated when there are problems.
func Decode(data []byte, v any, opts Options) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("config: Decode needs a non-nil pointer, got %T", v)
	}
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	root, err := parseDocument(data, opts.TopLevel)
	if err != nil {
		return err
	}
	var problems []error
	if root != nil {
		found := expandTree(root, lookup)
		found = append(found, decodeTree(root, rv.Elem())...)
		// In file order, as a reader fixes them.
		slices.SortStableFunc(found, func(a, b *KeyError) int { return cmp.Compare(a.Line, b.Line) })
		for _, p := range found {
			problems = append(problems, p)
		}
	}
	if val, ok := v.(Validator); ok {
		problems = append(problems, Problems(val.Validate())...)
	}
	return errors.Join(problems...)
}

// ReadFile reads the configuration file at path. When it does not exist the
// error reads "config: file PATH does not exist" and matches
// [fs.ErrNotExist]; any other failure reads "config: read PATH: ...".
func ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &missingFileError{path: path, err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return data, nil
}

// Source says which configuration file [Load] read.
type Source struct {
	// Path is the file read or, when Found is false, the default path
	// looked for.
	Path string
	// Found is false when no path was given and nothing is at the default
	// path: the program runs on its built-in defaults.
	Found bool
}

// String reads "PATH" for a file read, else "built-in defaults (no PATH)".
func (s Source) String() string {
	if s.Found {
		return s.Path
	}
	return "built-in defaults (no " + s.Path + ")"
}

// Load reads the configuration file a program was told to use. A non-empty
// path was given explicitly (--config FILE) and must exist: a missing one
// is an error ([ReadFile]'s "config: file PATH does not exist"). An empty
// path means defaultPath, which is optional: when nothing is there Load
// returns builtin (the program's own configuration text, e.g. the file it
// ships; nil reads as an empty file, so every default applies) and a Source
// with Found false, for the program to say it runs on its defaults. Any
// other failure to read is an error either way.
func Load(path, defaultPath string, builtin []byte) ([]byte, Source, error) {
	if path != "" {
		data, err := ReadFile(path)
		return data, Source{Path: path, Found: err == nil}, err
	}
	data, err := ReadFile(defaultPath)
	if errors.Is(err, fs.ErrNotExist) {
		return builtin, Source{Path: defaultPath}, nil
	}
	return data, Source{Path: defaultPath, Found: err == nil}, err
}

// missingFileError names the missing file without repeating the system's
// wording, and still matches fs.ErrNotExist.
type missingFileError struct {
	path string
	err  error
}

func (e *missingFileError) Error() string { return "config: file " + e.path + " does not exist" }
func (e *missingFileError) Unwrap() error { return e.err }

// Problems splits an error joined with errors.Join (recursively) into its
// parts, so each problem is one element; a nil error yields none and any
// other error is one problem.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}

// Keys returns the dotted path of every leaf key that a value of type t
// accepts, sorted: it descends into struct fields and pointers to structs;
// lists, maps and types that decode themselves (UnmarshalYAML or
// UnmarshalText, such as time.Time) are leaves. A program can check with
// it that its example file documents every key.
func Keys(t reflect.Type) []string {
	keys := leafKeys(t, "")
	sort.Strings(keys)
	return keys
}

func leafKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for name, idx := range yamlFields(t) {
		ft := t.FieldByIndex(idx).Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !decodesItself(ft) {
			keys = append(keys, leafKeys(ft, joinPath(prefix, name))...)
			continue
		}
		keys = append(keys, joinPath(prefix, name))
	}
	return keys
}
