package main

import (
	"bytes"
	"cmp"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/agent"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/tools/mcp"
)

// Config is the whole configuration file (config.yaml). Each section is
// owned by the package it configures; this type only composes them.
type Config struct {
	// DataDir holds the daemon's state: history.db and the embedded NATS
	// server's JetStream store.
	DataDir string `yaml:"data_dir"`
	// ShutdownTimeout is how long running turns may finish after SIGTERM
	// or SIGINT before they are cancelled (and redelivered after restart).
	ShutdownTimeout time.Duration  `yaml:"shutdown_timeout"`
	Log             LogConfig      `yaml:"log"`
	Bus             natsbus.Config `yaml:"bus"`
	LLM             llm.Config     `yaml:"llm"`
	Agent           agent.Config   `yaml:"agent"`
	Memory          memcfg.Config  `yaml:"memory"`
	Tools           tools.Config   `yaml:"tools"`
	MCP             mcp.Config     `yaml:"mcp"`
	Admin           admin.Config   `yaml:"admin"`
	Channels        ChannelsConfig `yaml:"channels"`
}

// ChannelsConfig holds the built-in chat platform adapters (YAML section
// "channels"). A nil section, or one with no token, is off.
type ChannelsConfig struct {
	Slack    *slackch.Config  `yaml:"slack"`
	Telegram *telegram.Config `yaml:"telegram"`
}

// LogConfig configures the process logger (YAML section "log").
type LogConfig struct {
	// Level is the lowest level logged: debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text (logfmt-style key=value) or json.
	Format string `yaml:"format"`
}

// defaultConfig returns the documented defaults; the shipped config.yaml
// with an empty environment decodes to exactly this value.
func defaultConfig() Config {
	return Config{
		DataDir:         "./data",
		ShutdownTimeout: 30 * time.Second,
		Log:             LogConfig{Level: "info", Format: "text"},
		Bus:             natsbus.DefaultConfig(),
		LLM:             llm.DefaultConfig(),
		Agent:           agent.DefaultConfig(),
		Memory:          memcfg.DefaultConfig(),
		Tools:           tools.DefaultConfig(),
		MCP:             mcp.DefaultConfig(),
		Admin:           admin.DefaultConfig(),
		Channels:        ChannelsConfig{Slack: new(slackch.DefaultConfig()), Telegram: new(telegram.DefaultConfig())},
	}
}

// LoadConfig reads, expands (from the process environment), decodes and
// validates the configuration file at path. See ParseConfig for the rules.
// On a problem in the file the error starts with a line naming the file,
// followed by one line per problem.
func LoadConfig(path string) (Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := ParseConfig(data, os.LookupEnv)
	if err != nil {
		return Config{}, fmt.Errorf("config %s:\n%w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes a configuration file over defaultConfig and validates
// the result.
//
//   - ${VAR} and ${VAR:-default} in scalar values are replaced with the
//     variable's value from lookupEnv (":-" also applies when the variable is
//     set but empty); $$ writes a literal $. Expansion happens after YAML
//     parsing, so a value cannot change the file's structure. An unquoted
//     value that expands to a number or boolean is decoded as one.
//   - Every key must be known; an unknown key is an error naming its dotted
//     path and line.
//   - A key present with an empty value sets the empty (zero) value, which
//     overrides the default: bus.listen: "" means in-process only. A section
//     present with no keys keeps its defaults.
//   - Durations use Go syntax: 90s, 10m, 1h30m.
//   - llm.base_url left empty means [llm.DefaultBaseURL].
//
// Every problem is reported: the error is an errors.Join of one error per
// problem, each naming its key and the rule it breaks. A nil lookupEnv
// behaves as an empty environment.
func ParseConfig(data []byte, lookupEnv func(string) (string, bool)) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	cfg := defaultConfig()
	root, err := parseDocument(data)
	if err != nil {
		return Config{}, err
	}
	var problems []error
	if root != nil {
		var found []problem
		ex := expander{lookup: lookupEnv, seen: make(map[*yaml.Node]bool)}
		ex.walk(root, "")
		found = append(found, ex.problems...)
		dec := decoder{}
		dec.decode(root, reflect.ValueOf(&cfg).Elem(), "")
		found = append(found, dec.problems...)
		// In file order, as a reader fixes them.
		slices.SortStableFunc(found, func(a, b problem) int { return cmp.Compare(a.line, b.line) })
		for _, p := range found {
			problems = append(problems, p.err)
		}
	}
	if cfg.LLM.BaseURL == "" {
		cfg.LLM.BaseURL = llm.DefaultBaseURL
	}
	problems = append(problems, flatten(cfg.Validate())...)
	if len(problems) > 0 {
		return Config{}, errors.Join(problems...)
	}
	return cfg, nil
}

// Validate checks every section and reports every problem (errors.Join),
// each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir: must not be empty"))
	}
	if c.ShutdownTimeout < time.Second || c.ShutdownTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("shutdown_timeout: must be between 1s and 1h, got %s", c.ShutdownTimeout))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: must be one of debug, info, warn, error, got %q", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: must be text or json, got %q", c.Log.Format))
	}
	errs = append(errs, c.Bus.Validate(), c.LLM.Validate(), c.Agent.Validate(), c.Memory.Validate(), c.Tools.Validate(), c.MCP.Validate(), c.Admin.Validate())
	if c.Channels.Slack != nil {
		errs = append(errs, c.Channels.Slack.Validate())
	}
	if c.Channels.Telegram != nil {
		errs = append(errs, c.Channels.Telegram.Validate())
	}
	if c.Bus.URL == "" && c.Bus.Listen != "" && c.Bus.Listen == c.Admin.Listen && !strings.HasSuffix(c.Admin.Listen, ":0") {
		errs = append(errs, fmt.Errorf("admin.listen: must differ from bus.listen, both are %q", c.Admin.Listen))
	}
	return errors.Join(errs...)
}

// Logger returns the process logger writing to w in the configured level
// and format. A nil w discards.
func (c Config) Logger(w io.Writer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	var level slog.Level
	switch c.Log.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// flatten splits a joined error into its parts (recursively) so every
// problem is one element; nil yields nothing.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// readConfigFile reads the configuration file, with a clear error when it
// does not exist.
func readConfigFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: file %s does not exist (pass --config FILE, or copy config.yaml from the Switchboard repository)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return data, nil
}

// parseDocument parses data as one YAML document and returns its top-level
// mapping, or nil for an empty document.
func parseDocument(data []byte) (*yaml.Node, error) {
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
		return nil, fmt.Errorf("line %d: the top level must be a mapping of sections (data_dir:, log:, bus:, llm:, agent:, admin:), got %s", root.Line, describeNode(root))
	}
	return root, nil
}

// envNameRE matches the NAME in ${NAME} and ${NAME:-default}.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// problem is a decoding problem and the line it was found on.
type problem struct {
	line int
	err  error
}

func newProblem(path string, n *yaml.Node, format string, args ...any) problem {
	return problem{line: n.Line, err: fmt.Errorf("%s (line %d): %s", displayPath(path), n.Line, fmt.Sprintf(format, args...))}
}

// expander replaces environment references in scalar values, recording
// problems with the key they occur under.
type expander struct {
	lookup   func(string) (string, bool)
	seen     map[*yaml.Node]bool // each node expanded once, even if aliased
	problems []problem
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
			e.problems = append(e.problems, newProblem(path, n, "%v", err))
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

var (
	durationType  = reflect.TypeFor[time.Duration]()
	unmarshalerT  = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshal = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decoder decodes a YAML node tree into a Go value strictly, collecting
// every problem with its dotted key path and line instead of stopping at
// the first.
type decoder struct {
	problems []problem
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
	if v.Kind() != reflect.Pointer && (reflect.PointerTo(v.Type()).Implements(unmarshalerT) || reflect.PointerTo(v.Type()).Implements(textUnmarshal)) {
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
			d.fail(path, n, "invalid value %q: %v", n.Value, err)
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

func displayPath(path string) string {
	if path == "" {
		return "top level"
	}
	return path
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
