package config

import (
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// textValue is a TextUnmarshaler leaf for the generic decoder test.
type textValue struct{ ip net.IP }

func (v *textValue) UnmarshalText(b []byte) error {
	v.ip = net.ParseIP(string(b))
	if v.ip == nil {
		return errors.New("not an IP")
	}
	return nil
}

type inlineOpts struct {
	Shared string `yaml:"shared"`
}

type genericSection struct {
	Token string `yaml:"token"`
}

type genericConfig struct {
	inlineOpts `yaml:",inline"`
	Section    *genericSection           `yaml:"section"`
	Off        *genericSection           `yaml:"off"`
	List       []genericSection          `yaml:"list"`
	Names      []string                  `yaml:"names"`
	Map        map[string]genericSection `yaml:"map"`
	IP         textValue                 `yaml:"ip"`
	Flag       bool                      `yaml:"flag"`
	Count      uint                      `yaml:"count"`
	Untagged   string                    // key "untagged"
	Skipped    string                    `yaml:"-"`
	//lint:ignore U1000 the decoder must skip unexported fields
	hidden string                     // not a key: unexported
	Nested map[string]map[string]bool `yaml:"nested"`
}

func TestDecoderGeneric(t *testing.T) {
	src := `
shared: s
section: {token: t1}
off:
list:
  - token: a
  - token: b
names: [x, y]
map:
  one: {token: m1}
ip: 10.0.0.1
flag: yes
count: 3
untagged: u
nested: {a: {b: true}}
`
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	got := genericConfig{Off: &genericSection{Token: "default"}}
	var d decoder
	d.decode(n.Content[0], reflect.ValueOf(&got).Elem(), "")
	if len(d.problems) > 0 {
		t.Fatalf("decode problems: %v", d.problems[0])
	}
	want := genericConfig{
		inlineOpts: inlineOpts{Shared: "s"},
		Section:    &genericSection{Token: "t1"},
		List:       []genericSection{{Token: "a"}, {Token: "b"}},
		Names:      []string{"x", "y"},
		Map:        map[string]genericSection{"one": {Token: "m1"}},
		IP:         textValue{ip: net.ParseIP("10.0.0.1")},
		Flag:       true,
		Count:      3,
		Untagged:   "u",
		Nested:     map[string]map[string]bool{"a": {"b": true}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(genericConfig{}, textValue{})); diff != "" {
		t.Fatalf("decode mismatch (-want +got):\n%s", diff)
	}

	bad := `
section: {tokn: x}
list:
  - {token: a, extra: 1}
names: x
map: [1]
ip: not-an-ip
count: -1
skipped: no
hidden: no
flag: maybe
nested: {a: {b: {c: 1}}}
`
	if err := yaml.Unmarshal([]byte(bad), &n); err != nil {
		t.Fatal(err)
	}
	got = genericConfig{}
	d = decoder{}
	d.decode(n.Content[0], reflect.ValueOf(&got).Elem(), "")
	var msgs []string
	for _, p := range d.problems {
		msgs = append(msgs, p.Error())
	}
	wantMsgs := []string{
		"section.tokn (line 2): unknown key (did you mean token?)",
		"list[0].extra (line 4): unknown key",
		`names (line 5): must be a list, got the value "x"`,
		"map (line 6): must be a mapping, got a list",
		`ip (line 7): invalid value "not-an-ip": not an IP`,
		`count (line 8): must be a non-negative integer, got "-1"`,
		"skipped (line 9): unknown key",
		"hidden (line 10): unknown key",
		`flag (line 11): must be true or false, got "maybe"`,
		"nested.a.b (line 12): must be true or false, got a mapping",
	}
	if diff := cmp.Diff(wantMsgs, msgs); diff != "" {
		t.Fatalf("decode problems (-want +got):\n%s", diff)
	}
}

type loop struct {
	A *loop `yaml:"a"`
}

func TestDecoderAliasLoop(t *testing.T) {
	// a: *self, where self is the mapping itself: decoding must stop.
	m := &yaml.Node{Kind: yaml.MappingNode, Line: 1}
	m.Content = []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "a", Line: 1},
		{Kind: yaml.AliasNode, Alias: m, Line: 1},
	}
	var got loop
	d := decoder{}
	d.decode(m, reflect.ValueOf(&got).Elem(), "")
	if len(d.problems) != 1 || !strings.Contains(d.problems[0].Error(), "nested too deeply") {
		t.Fatalf("decoding a recursive alias: problems %v, want one 'nested too deeply'", d.problems)
	}
}

func TestSuggest(t *testing.T) {
	fields := map[string][]int{"max_steps": nil, "max_context_turns": nil, "workspace": nil}
	for in, want := range map[string]string{
		"max_stepz":  "max_steps",
		"workspce":   "workspace",
		"max_step":   "max_steps",
		"completely": "",
		"":           "",
	} {
		if got := suggest(in, fields); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
	if !slices.Equal(Problems(nil), nil) {
		t.Error("Problems(nil) is not empty")
	}
}
