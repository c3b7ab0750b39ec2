package config

import (
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// server and app are a small program's configuration: the decoder knows
// nothing but their yaml tags and Validate.
type server struct {
	Listen  string        `yaml:"listen"`
	Timeout time.Duration `yaml:"timeout"`
	Tags    []string      `yaml:"tags"`
}

type app struct {
	Name    string            `yaml:"name"`
	Workers int               `yaml:"workers"`
	Debug   bool              `yaml:"debug"`
	Server  server            `yaml:"server"`
	Backup  *server           `yaml:"backup"`
	Labels  map[string]string `yaml:"labels"`
}

func defaults() app {
	return app{Name: "demo", Workers: 4, Server: server{Listen: "127.0.0.1:80", Timeout: time.Minute, Tags: []string{"a"}}}
}

// validApp adds rules that Decode must run after decoding.
type validApp struct {
	app `yaml:",inline"`
}

func (a validApp) Validate() error {
	var errs []error
	if a.Workers < 1 {
		errs = append(errs, errors.New("workers: must be at least 1"))
	}
	if a.Name == "" {
		errs = append(errs, errors.New("name: must not be empty"))
	}
	return errors.Join(errs...)
}

// ptrValidApp validates through a pointer receiver.
type ptrValidApp struct {
	Workers int `yaml:"workers"`
}

func (a *ptrValidApp) Validate() error {
	if a.Workers > 10 {
		return errors.New("workers: must be at most 10")
	}
	return nil
}

func messages(err error) []string {
	var out []string
	for _, p := range Problems(err) {
		out = append(out, p.Error())
	}
	return out
}

func TestDecodeOverDefaults(t *testing.T) {
	tests := []struct {
		name, src string
		want      func(*app)
	}{
		{"empty file", "", func(*app) {}},
		{"only a comment", "# nothing\n", func(*app) {}},
		{"null document", "~\n", func(*app) {}},
		{"section without keys", "server:\n", func(*app) {}},
		{"empty section", "server: {}\n", func(*app) {}},
		{"a key left out keeps its default", "workers: 9\n", func(a *app) { a.Workers = 9 }},
		{"a key present and empty sets zero", "name:\nserver:\n  listen: \"\"\n  tags:\n", func(a *app) {
			a.Name = ""
			a.Server.Listen = ""
			a.Server.Tags = nil
		}},
		{"pointer section is allocated", "backup: {listen: 'b:1'}\n", func(a *app) { a.Backup = &server{Listen: "b:1"} }},
		{"pointer section set empty is allocated", "backup: {}\n", func(a *app) { a.Backup = &server{} }},
		{"durations in Go syntax", "server: {timeout: 1h30m}\n", func(a *app) { a.Server.Timeout = 90 * time.Minute }},
		{"merge keys, the mapping's own keys win", "server:\n  <<: &base {listen: 'm:1', timeout: 5s}\n  timeout: 7s\nbackup:\n  <<: [*base]\n", func(a *app) {
			a.Server.Listen = "m:1"
			a.Server.Timeout = 7 * time.Second
			a.Backup = &server{Listen: "m:1", Timeout: 5 * time.Second}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := defaults()
			if err := Decode([]byte(tt.src), &got, Options{}); err != nil {
				t.Fatalf("Decode(%q): %v", tt.src, err)
			}
			want := defaults()
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("Decode(%q) mismatch (-want +got):\n%s", tt.src, diff)
			}
		})
	}
}

func TestDecodeDocumentProblemsStopBeforeValidate(t *testing.T) {
	tests := []struct {
		name, src string
		opts      Options
		want      string
	}{
		{"syntax", "a: [1\nb: 2\n", Options{}, "invalid YAML: yaml: line "},
		{"two documents", "name: x\n---\nname: y\n", Options{}, "line 2: the file must hold one YAML document, found a second one"},
		{"list at the top", "- a\n- b\n", Options{}, "line 1: the top level must be a mapping of keys, got a list"},
		{"scalar at the top", "hello\n", Options{}, `line 1: the top level must be a mapping of keys, got the value "hello"`},
		{"the caller's description", "- a\n", Options{TopLevel: "a mapping of sections (name:, server:)"}, "line 1: the top level must be a mapping of sections (name:, server:), got a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := validApp{app: defaults()}
			v.Workers = 0 // Validate would complain, but must not run
			err := Decode([]byte(tt.src), &v, tt.opts)
			msgs := messages(err)
			if len(msgs) != 1 || !strings.HasPrefix(msgs[0], tt.want) {
				t.Fatalf("Decode(%q) = %q, want one problem starting with %q", tt.src, msgs, tt.want)
			}
		})
	}
	// An empty file is an empty mapping: Validate runs on the defaults.
	v := validApp{app: defaults()}
	v.Workers = 0
	if msgs := messages(Decode(nil, &v, Options{})); !cmp.Equal(msgs, []string{"workers: must be at least 1"}) {
		t.Fatalf("Decode(empty) over an invalid default = %q, want Validate's problem", msgs)
	}
}

func TestDecodeReportsEveryProblemInFileOrderThenValidate(t *testing.T) {
	src := `
name: ${APP_NAME}
server:
  listen: ${BAD
  timeout: 600
  tags: x
wokers: 2
debug: maybe
labels:
  team: ${TEAM}
  owner: ${1OWNER}
backup: [1]
workers: 1.5
`[1:]
	v := validApp{app: defaults()}
	v.Workers = 0
	err := Decode([]byte(src), &v, Options{LookupEnv: envMap(map[string]string{"APP_NAME": "", "TEAM": "core"})})
	want := []string{
		`server.listen (line 3): unterminated ${ in "${BAD" (write $$ for a literal $)`,
		`server.timeout (line 4): must be a duration such as 90s, 10m or 1h30m, got "600"`,
		`server.tags (line 5): must be a list, got the value "x"`,
		"wokers (line 6): unknown key (did you mean workers?)",
		`debug (line 7): must be true or false, got "maybe"`,
		"labels.owner (line 10): invalid environment variable reference ${1OWNER}: want ${NAME} or ${NAME:-default} with NAME of letters, digits and _ (write $$ for a literal $)",
		"backup (line 11): must be a mapping of keys, got a list",
		`workers (line 12): must be an integer, got "1.5"`,
		// Then Validate, in its own order, on what did decode.
		"workers: must be at least 1",
		"name: must not be empty",
	}
	if diff := cmp.Diff(want, messages(err)); diff != "" {
		t.Fatalf("problems (-want +got):\n%s", diff)
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Fatalf("error text is not one problem per line:\n%s", got)
	}
	if v.Labels["team"] != "core" || v.Server.Timeout != time.Minute {
		t.Fatalf("keys that decoded: labels %v, timeout %s; want team=core and the default 1m kept", v.Labels, v.Server.Timeout)
	}

	// Each decoding problem is a *KeyError locating the key.
	var ke *KeyError
	if !errors.As(Problems(err)[3], &ke) || ke.Path != "wokers" || ke.Line != 6 || ke.Column != 1 {
		t.Fatalf("problem 3 = %#v, want a *KeyError at wokers, line 6, column 1", ke)
	}
	if !errors.As(Problems(err)[1], &ke) || ke.Path != "server.timeout" || ke.Line != 4 || ke.Column != 12 {
		t.Fatalf("problem 1 = %#v, want a *KeyError at server.timeout, line 4, column 12 (the value)", ke)
	}
}

func TestDecodeValidatePointerReceiver(t *testing.T) {
	var v ptrValidApp
	if msgs := messages(Decode([]byte("workers: 11\n"), &v, Options{})); !cmp.Equal(msgs, []string{"workers: must be at most 10"}) {
		t.Fatalf("Decode with a pointer-receiver Validate = %q", msgs)
	}
	if err := Decode([]byte("workers: 10\n"), &v, Options{}); err != nil || v.Workers != 10 {
		t.Fatalf("Decode(workers: 10) = %v, %d", err, v.Workers)
	}
}

// errBadLevel is what a self-decoding leaf reports.
var errBadLevel = errors.New("not a level")

type level int

func (l *level) UnmarshalText(b []byte) error {
	switch string(b) {
	case "low":
		*l = 1
	case "high":
		*l = 2
	default:
		return errBadLevel
	}
	return nil
}

func TestDecodeLeafErrorIsWrapped(t *testing.T) {
	var v struct {
		Level level `yaml:"level"`
	}
	err := Decode([]byte("level: loud\n"), &v, Options{})
	if err == nil || err.Error() != `level (line 1): invalid value "loud": not a level` || !errors.Is(err, errBadLevel) {
		t.Fatalf("Decode(level: loud) = %v, want the leaf's own error, wrapped", err)
	}
	if err := Decode([]byte("level: high\n"), &v, Options{}); err != nil || v.Level != 2 {
		t.Fatalf("Decode(level: high) = %v, %d", err, v.Level)
	}
}

func TestDecodeEnvironment(t *testing.T) {
	hostile := "k\"ey'\n  workers: 999\n# [x]: {y} &a *b | > %"
	src := "name: ${NAME}\nworkers: ${N}\ndebug: ${ON}\nlabels:\n  quoted: '${N}'\n  both: &d '$$$$'\n  alias: *d\n  unset: ${UNSET:-fallback}\n"
	var v app
	err := Decode([]byte(src), &v, Options{LookupEnv: envMap(map[string]string{"NAME": hostile, "N": "12", "ON": "true"})})
	if err != nil {
		t.Fatal(err)
	}
	want := app{Name: hostile, Workers: 12, Debug: true, Labels: map[string]string{
		"quoted": "12", // a quoted expansion stays a string
		"both":   "$$", // $$ is one $ ...
		"alias":  "$$", // ... and an aliased value is expanded once
		"unset":  "fallback",
	}}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Fatalf("expanded (-want +got):\n%s", diff)
	}

	// An unquoted expansion that is not a number is reported against the key.
	err = Decode([]byte("workers: ${N}\n"), &v, Options{LookupEnv: envMap(map[string]string{"N": "12 # workers"})})
	if msgs := messages(err); !cmp.Equal(msgs, []string{`workers (line 1): must be an integer, got "12 # workers"`}) {
		t.Fatalf("non-numeric env for workers: %q", msgs)
	}

	// An empty unquoted expansion is null: the zero value.
	v = defaults()
	if err := Decode([]byte("name: ${EMPTY}\n"), &v, Options{LookupEnv: envMap(map[string]string{"EMPTY": ""})}); err != nil || v.Name != "" {
		t.Fatalf("name: ${EMPTY} = %q, %v; want empty", v.Name, err)
	}

	// Keys and comments are never expanded; a nil LookupEnv is an empty
	// environment.
	err = Decode([]byte("# ${BAD\n${KEY}: 1\nname: x${HOME}y\n"), &v, Options{})
	if msgs := messages(err); !cmp.Equal(msgs, []string{"${KEY} (line 2): unknown key"}) {
		t.Fatalf("env reference in a key: %q, want it left as an unknown key", msgs)
	}
	if v.Name != "xy" {
		t.Fatalf("name with a nil LookupEnv = %q, want \"xy\"", v.Name)
	}
}

func TestDecodeNeedsPointer(t *testing.T) {
	for _, v := range []any{app{}, (*app)(nil), nil} {
		if err := Decode([]byte("name: x\n"), v, Options{}); err == nil || !strings.Contains(err.Error(), "needs a non-nil pointer") {
			t.Errorf("Decode into %T = %v, want a non-nil pointer error", v, err)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.yaml")
	_, err := ReadFile(missing)
	if err == nil || err.Error() != "config: file "+missing+" does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile(missing) = %v, want 'config: file ... does not exist' matching fs.ErrNotExist", err)
	}
	_, err = ReadFile(dir) // a directory cannot be read as a file
	if err == nil || !strings.HasPrefix(err.Error(), "config: read "+dir+": ") || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile(dir) = %v, want a read error", err)
	}
}

func TestProblems(t *testing.T) {
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	got := Problems(errors.Join(a, errors.Join(b, nil, errors.Join(c))))
	if len(got) != 3 || got[0] != a || got[1] != b || got[2] != c {
		t.Fatalf("Problems(nested join) = %v, want [a b c]", got)
	}
	wrapped := errors.Join(a, b)
	if got := Problems(&KeyError{Err: wrapped}); len(got) != 1 {
		t.Fatalf("Problems(single-wrapped join) = %v, want it kept whole", got)
	}
}

type keysInline struct {
	Shared string `yaml:"shared"`
}

type keysSection struct {
	Token string `yaml:"token"`
	Inner struct {
		Deep bool `yaml:"deep"`
	} `yaml:"inner"`
}

type keysConfig struct {
	keysInline `yaml:",inline"`
	Section    keysSection            `yaml:"section"`
	Optional   *keysSection           `yaml:"optional"`
	Map        map[string]keysSection `yaml:"map"`
	List       []keysSection          `yaml:"list"`
	When       time.Time              `yaml:"when"`
	Level      level                  `yaml:"level"`
	Untagged   string
	Skipped    string `yaml:"-"`
}

func TestKeys(t *testing.T) {
	want := []string{
		"level", "list", "map",
		"optional.inner.deep", "optional.token",
		"section.inner.deep", "section.token",
		"shared", "untagged", "when",
	}
	if diff := cmp.Diff(want, Keys(reflect.TypeFor[keysConfig]())); diff != "" {
		t.Fatalf("Keys (-want +got):\n%s", diff)
	}
	// Every key Keys lists is one the decoder accepts, and they are all.
	src := `
level: high
list: []
map: {}
optional: {inner: {deep: true}, token: t}
section: {inner: {deep: true}, token: t}
shared: s
untagged: u
when: 2024-01-01T00:00:00Z
`
	var v keysConfig
	if err := Decode([]byte(src), &v, Options{}); err != nil {
		t.Fatalf("decoding every key Keys lists: %v", err)
	}
	if !v.Section.Inner.Deep || v.Optional == nil || v.Level != 2 || v.When.Year() != 2024 || v.Shared != "s" {
		t.Fatalf("decoded %+v", v)
	}
	if err := Decode([]byte("skipped: x\n"), &v, Options{}); err == nil {
		t.Fatal("skipped (yaml:\"-\") decoded, but Keys does not list it")
	}
}

// TestImportsNoSwitchboardPackage: the decoder knows a program's sections
// only by their yaml tags and Validate (docs/architecture.md).
func TestImportsNoSwitchboardPackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/switchboard-chat/") {
				t.Errorf("%s imports %s: package config must not depend on the program it configures", name, p)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no product files found")
	}
}

func TestDecodeNullPointerSectionIsNil(t *testing.T) {
	v := defaults()
	v.Backup = &server{Listen: "default:1"}
	if err := Decode([]byte("backup:\n"), &v, Options{}); err != nil || v.Backup != nil {
		t.Fatalf("backup: (null) over a default = %+v, %v; want nil (off)", v.Backup, err)
	}
	v.Backup = &server{Listen: "default:1"}
	if err := Decode([]byte("backup: {}\n"), &v, Options{}); err != nil || v.Backup == nil || v.Backup.Listen != "default:1" {
		t.Fatalf("backup: {} over a default = %+v, %v; want the default kept", v.Backup, err)
	}
}

func TestLoadDefaultPathOptionalExplicitPathRequired(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "config.yaml")
	data, src, err := Load("", def, []byte("builtin: 1\n"))
	if err != nil || string(data) != "builtin: 1\n" || src.Found || src.Path != def || src.String() != "built-in defaults (no "+def+")" {
		t.Fatalf("Load(default missing) = %q, %+v, %v; want built-in defaults", data, src, err)
	}
	explicit := filepath.Join(dir, "mine.yaml")
	if _, src, err := Load(explicit, def, nil); err == nil || err.Error() != "config: file "+explicit+" does not exist" || src.Found {
		t.Fatalf("Load(explicit missing) = %+v, %v; want an error naming the file", src, err)
	}
	if err := os.WriteFile(def, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, src, err := Load("", def, nil); err != nil || string(data) != "a: 1\n" || !src.Found || src.String() != def {
		t.Fatalf("Load(default present) = %q, %+v, %v", data, src, err)
	}
	if _, _, err := Load("", dir, nil); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(default unreadable) = %v, want a read error", err)
	}
}
