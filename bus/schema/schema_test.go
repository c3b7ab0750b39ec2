package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/schema"
)

// maxBytes implements the schemas' own keyword: the UTF-8 length of a
// string, or the summed length of an object's keys and string values.
type maxBytes struct{ limit int }

func (m *maxBytes) Validate(ctx *jsonschema.ValidatorContext, v any) {
	n := 0
	switch v := v.(type) {
	case string:
		n = len(v)
	case map[string]any:
		for k, val := range v {
			n += len(k)
			if s, ok := val.(string); ok {
				n += len(s)
			}
		}
	default:
		return
	}
	if n > m.limit {
		ctx.AddError(&maxBytesError{got: n, want: m.limit})
	}
}

type maxBytesError struct{ got, want int }

func (*maxBytesError) KeywordPath() []string { return []string{"maxBytes"} }

func (e *maxBytesError) LocalizedString(p *message.Printer) string {
	return p.Sprintf("maxBytes: got %d bytes, want at most %d", e.got, e.want)
}

func maxBytesVocab(t *testing.T) *jsonschema.Vocabulary {
	t.Helper()
	const url = "urn:switchboard:bus:vocab:max-bytes"
	meta, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"properties":{"maxBytes":{"type":"integer","minimum":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, meta); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonschema.Vocabulary{URL: url, Schema: sch, Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
		v, ok := obj["maxBytes"]
		if !ok {
			return nil, nil
		}
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil {
			return nil, fmt.Errorf("maxBytes: %w", err)
		}
		return &maxBytes{limit: n}, nil
	}}
}

// compile loads one schema file from schema.Files with formats asserted
// (date-time) and the maxBytes keyword.
func compile(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	f, err := schema.Files.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.AssertVocabs()
	c.RegisterVocabulary(maxBytesVocab(t))
	if err := c.AddResource(name, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return sch
}

// validateSchema validates data, which must be JSON text: UTF-8 (RFC
// 8259 §8.1), which is what a JSON parser that does not replace bad bytes
// checks before any schema applies.
func validateSchema(sch *jsonschema.Schema, data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("not JSON text: not valid UTF-8")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

var subj = bus.Subjects{Prefix: "chat"}

// goInbound validates data as the runtime does, on the subject the
// envelope's own channel and chat_id give (or a fixed one when they are
// unusable, which the Go validation then rejects anyway).
func goInbound(data []byte) error {
	subject := "chat.in.console.demo"
	var ids struct {
		Channel any `json:"channel"`
		ChatID  any `json:"chat_id"`
	}
	if json.Unmarshal(data, &ids) == nil {
		ch, _ := ids.Channel.(string)
		chat, _ := ids.ChatID.(string)
		if bus.ValidChannel(ch) && chat != "" {
			subject = subj.In(ch, chat)
		}
	}
	_, err := bus.ParseInbound(subj, subject, data, bus.DefaultMaxTextBytes)
	return err
}

func goOutbound(data []byte) error {
	var o bus.Outbound
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	return o.Validate()
}

// invalidWhy names, for every invalid example file, the field the Go
// validation must blame, so an example cannot fail for an unintended reason.
var invalidWhy = map[string]string{
	"inbound/invalid/v-is-2.json":                      `"v"`,
	"inbound/invalid/v-is-a-string.json":               `"v"`,
	"inbound/invalid/v-missing.json":                   `"v"`,
	"inbound/invalid/id-missing.json":                  `"id"`,
	"inbound/invalid/id-is-a-number.json":              `"id"`,
	"inbound/invalid/channel-upper-case.json":          `"channel"`,
	"inbound/invalid/chat-id-empty.json":               `"chat_id"`,
	"inbound/invalid/user-id-null.json":                `"user_id"`,
	"inbound/invalid/thread-id-is-a-number.json":       `"thread_id"`,
	"inbound/invalid/text-missing.json":                `"text"`,
	"inbound/invalid/text-empty-no-attachments.json":   `"text"`,
	"inbound/invalid/attachment-kind-unknown.json":     `"attachments[0].kind"`,
	"inbound/invalid/attachment-kind-missing.json":     `"attachments[0].kind"`,
	"inbound/invalid/attachment-data-not-base64.json":  `"attachments[0].data"`,
	"inbound/invalid/attachment-data-bad-padding.json": `"attachments[0].data"`,
	"inbound/invalid/attachment-size-negative.json":    `"attachments[0].size"`,
	"inbound/invalid/attachment-size-fraction.json":    `"attachments.size"`,
	"inbound/invalid/attachments-not-a-list.json":      `"attachments"`,
	"inbound/invalid/is-group-a-string.json":           `"is_group"`,
	"inbound/invalid/ts-not-a-time.json":               `"ts"`,
	"inbound/invalid/ts-february-30.json":              `"ts"`,
	"inbound/invalid/ts-space-for-t.json":              `"ts"`,
	"inbound/invalid/ts-leap-second.json":              `"ts"`,
	"inbound/invalid/meta-value-a-number.json":         `"meta"`,
	"inbound/invalid/meta-a-list.json":                 `"meta"`,
	"inbound/invalid/meta-33-keys.json":                `"meta"`,
	"inbound/invalid/payload-a-list.json":              "payload",
	"inbound/invalid/payload-a-string.json":            "payload",
	"inbound/invalid/payload-not-utf8.json":            "UTF-8",
	"inbound/invalid/id-with-nul.json":                 `"id": must not contain NUL`,
	"inbound/invalid/id-with-escape.json":              `"id": must not contain control characters, got U+001B`,
	"inbound/invalid/id-with-c1-control.json":          `"id": must not contain control characters, got U+0085`,
	"inbound/invalid/chat-id-with-nul.json":            `"chat_id": must not contain NUL`,
	"inbound/invalid/thread-id-with-newline.json":      `"thread_id": must not contain control characters`,
	"inbound/invalid/user-id-with-del.json":            `"user_id": must not contain control characters, got U+007F`,
	"inbound/invalid/reply-to-with-tab.json":           `"reply_to": must not contain control characters, got U+0009`,
	"inbound/invalid/user-name-with-nul.json":          `"user_name": must not contain NUL`,
	"inbound/invalid/text-with-nul.json":               `"text": must not contain NUL`,
	"inbound/invalid/attachment-url-with-newline.json": `"attachments[0].url": must not contain control characters`,
	"inbound/invalid/attachment-mime-with-nul.json":    `"attachments[0].mime": must not contain NUL`,
	"inbound/invalid/attachment-name-with-nul.json":    `"attachments[0].name": must not contain NUL`,
	"inbound/invalid/meta-key-with-nul.json":           `"meta": key`,
	"inbound/invalid/meta-value-with-nul.json":         `"meta": value of "k" must not contain NUL`,
	"outbound/invalid/kind-unknown.json":               `"kind"`,
	"outbound/invalid/kind-missing.json":               `"kind"`,
	"outbound/invalid/seq-negative.json":               `"seq"`,
	"outbound/invalid/seq-fraction.json":               `Outbound.seq`,
	"outbound/invalid/v-is-2.json":                     `"v"`,
	"outbound/invalid/id-missing.json":                 `"id"`,
	"outbound/invalid/channel-with-dot.json":           `"channel"`,
	"outbound/invalid/chat-id-missing.json":            `"chat_id"`,
	"outbound/invalid/final-a-string.json":             `Outbound.final`,
	"outbound/invalid/meta-value-a-bool.json":          `Outbound.meta`,
	"outbound/invalid/attachment-kind-unknown.json":    `"attachments[0].kind"`,
	"outbound/invalid/text-a-list.json":                `Outbound.text`,
	"outbound/invalid/id-with-nul.json":                `"id": must not contain NUL`,
	"outbound/invalid/chat-id-with-c1-control.json":    `"chat_id": must not contain control characters, got U+009B`,
	"outbound/invalid/thread-id-with-escape.json":      `"thread_id": must not contain control characters, got U+001B`,
	"outbound/invalid/in-reply-to-with-newline.json":   `"in_reply_to": must not contain control characters, got U+000A`,
}

type example struct {
	name  string
	data  []byte
	valid bool
	why   string // for an invalid one: text the Go error must contain
}

func loadExamples(t *testing.T, dir string) []example {
	t.Helper()
	var out []example
	for _, kind := range []string{"valid", "invalid"} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, kind, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no examples in testdata/%s/%s", dir, kind)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.ToSlash(strings.TrimPrefix(f, "testdata"+string(filepath.Separator)))
			ex := example{name: name, data: data, valid: kind == "valid"}
			if !ex.valid {
				why, ok := invalidWhy[name]
				if !ok {
					t.Fatalf("%s: add the field its Go error must name to invalidWhy", name)
				}
				ex.why = why
			}
			out = append(out, ex)
		}
	}
	return out
}

// generated returns inbound examples around the byte limits, where
// characters and bytes differ.
func generated() []example {
	env := func(edit func(m map[string]any)) []byte {
		m := map[string]any{"v": 1, "id": "g1", "channel": "wechat", "chat_id": "c", "user_id": "u", "text": "hi"}
		edit(m)
		b, _ := json.Marshal(m)
		return b
	}
	han := func(n int) string { return strings.Repeat("张", n) } // 3 bytes each
	meta := func(keys, valueBytes int) map[string]string {
		m := map[string]string{}
		for i := range keys {
			m[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", valueBytes)
		}
		return m
	}
	out := []example{
		{name: "id of 256 bytes", data: env(func(m map[string]any) { m["id"] = strings.Repeat("x", 256) }), valid: true},
		{name: "id of 85 three-byte characters (255 bytes)", data: env(func(m map[string]any) { m["id"] = han(85) }), valid: true},
		{name: "id of 86 three-byte characters (258 bytes)", data: env(func(m map[string]any) { m["id"] = han(86) }), why: `"id"`},
		{name: "id of 257 bytes", data: env(func(m map[string]any) { m["id"] = strings.Repeat("x", 257) }), why: `"id"`},
		{name: "chat_id of 512 bytes", data: env(func(m map[string]any) { m["chat_id"] = strings.Repeat("c", 512) }), valid: true},
		{name: "chat_id of 171 three-byte characters", data: env(func(m map[string]any) { m["chat_id"] = han(171) }), why: `"chat_id"`},
		{name: "user_name of 200 three-byte characters", data: env(func(m map[string]any) { m["user_name"] = han(200) }), why: `"user_name"`},
		{name: "reply_to of 257 bytes", data: env(func(m map[string]any) { m["reply_to"] = strings.Repeat("r", 257) }), why: `"reply_to"`},
		{name: "thread_id of 513 bytes", data: env(func(m map[string]any) { m["thread_id"] = strings.Repeat("t", 513) }), why: `"thread_id"`},
		{name: "text of 65536 bytes", data: env(func(m map[string]any) { m["text"] = strings.Repeat("x", 65536) }), valid: true},
		{name: "text of 65537 bytes", data: env(func(m map[string]any) { m["text"] = strings.Repeat("x", 65537) }), why: `"text"`},
		{name: "text of 21846 three-byte characters", data: env(func(m map[string]any) { m["text"] = han(21846) }), why: `"text"`},
		{name: "33 attachments", data: env(func(m map[string]any) {
			a := make([]map[string]any, 33)
			for i := range a {
				a[i] = map[string]any{"kind": "file", "url": "u"}
			}
			m["attachments"] = a
		}), why: `"attachments"`},
		{name: "32 attachments", data: env(func(m map[string]any) {
			a := make([]map[string]any, 32)
			for i := range a {
				a[i] = map[string]any{"kind": "file", "url": "u"}
			}
			m["attachments"] = a
		}), valid: true},
		{name: "attachment url of 8193 bytes", data: env(func(m map[string]any) {
			m["attachments"] = []map[string]any{{"kind": "file", "url": strings.Repeat("u", 8193)}}
		}), why: `"attachments[0].url"`},
		{name: "attachment mime of 256 bytes", data: env(func(m map[string]any) {
			m["attachments"] = []map[string]any{{"kind": "file", "url": "u", "mime": strings.Repeat("m", 256)}}
		}), why: `"attachments[0].mime"`},
		{name: "attachment name of 342 three-byte characters", data: env(func(m map[string]any) {
			m["attachments"] = []map[string]any{{"kind": "file", "url": "u", "name": han(342)}}
		}), why: `"attachments[0].name"`},
		{name: "meta of 32 keys, 4096 bytes", data: env(func(m map[string]any) { m["meta"] = meta(32, 125) }), valid: true},
		{name: "meta of 32 keys, 4128 bytes", data: env(func(m map[string]any) { m["meta"] = meta(32, 126) }), why: `"meta"`},
		{name: "meta of one 4097-byte value", data: env(func(m map[string]any) { m["meta"] = map[string]string{"k": han(1366)} }), why: `"meta"`},
	}
	// The edges of the control ranges, in every id and in the free texts.
	for _, r := range []rune{0x00, 0x09, 0x0A, 0x1F, 0x20, 0x7E, 0x7F, 0x80, 0x9F, 0xA0, 0x2028, 0xFEFF} {
		for _, field := range []string{"id", "chat_id", "thread_id", "user_id", "reply_to", "user_name", "text"} {
			v := fmt.Sprintf("a%cb", r)
			ex := example{name: fmt.Sprintf("%s with U+%04X", field, r), data: env(func(m map[string]any) { m[field] = v })}
			switch text := field == "user_name" || field == "text"; {
			case text && r == 0:
				ex.why = `"` + field + `": must not contain NUL`
			case !text && !bus.ValidID(v):
				ex.why = `"` + field + `": must not contain`
			default:
				ex.valid = true
			}
			out = append(out, ex)
		}
	}
	return out
}

func checkAgreement(t *testing.T, sch *jsonschema.Schema, goValidate func([]byte) error, examples []example) {
	t.Helper()
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			serr, gerr := validateSchema(sch, ex.data), goValidate(ex.data)
			if ex.valid {
				if serr != nil {
					t.Errorf("schema rejects a valid example: %v", serr)
				}
				if gerr != nil {
					t.Errorf("Go validation rejects a valid example: %v", gerr)
				}
				return
			}
			if serr == nil {
				t.Errorf("schema accepts an invalid example (Go says %v)", gerr)
			}
			if gerr == nil {
				t.Errorf("Go validation accepts an invalid example (schema says %v)", serr)
			} else if !strings.Contains(gerr.Error(), ex.why) {
				t.Errorf("Go error %q does not name %s", gerr, ex.why)
			}
		})
	}
}

func TestInboundSchemaAgreesWithParseInbound(t *testing.T) {
	sch := compile(t, schema.InboundFile)
	checkAgreement(t, sch, goInbound, append(loadExamples(t, "inbound"), generated()...))
}

func TestOutboundSchemaAgreesWithValidate(t *testing.T) {
	sch := compile(t, schema.OutboundFile)
	checkAgreement(t, sch, goOutbound, loadExamples(t, "outbound"))
}

// TestSchemasMatchGoLimits ties the numbers in the schema files to the Go
// constants, and checks the attachment definition is the same in both.
func TestSchemasMatchGoLimits(t *testing.T) {
	load := func(name string) map[string]any {
		data, err := schema.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	in, out := load(schema.InboundFile), load(schema.OutboundFile)
	prop := func(doc map[string]any, name, key string) any {
		return doc["properties"].(map[string]any)[name].(map[string]any)[key]
	}
	for _, c := range []struct {
		doc        map[string]any
		field, key string
		want       float64
	}{
		{in, "id", "maxBytes", bus.MaxIDBytes},
		{in, "chat_id", "maxBytes", bus.MaxRefBytes},
		{in, "thread_id", "maxBytes", bus.MaxRefBytes},
		{in, "user_id", "maxBytes", bus.MaxRefBytes},
		{in, "user_name", "maxBytes", bus.MaxRefBytes},
		{in, "reply_to", "maxBytes", bus.MaxIDBytes},
		{in, "text", "maxBytes", bus.DefaultMaxTextBytes},
		{in, "attachments", "maxItems", bus.MaxAttachments},
		{in, "meta", "maxProperties", bus.MaxMetaKeys},
		{in, "meta", "maxBytes", bus.MaxMetaBytes},
		{out, "id", "maxBytes", bus.MaxIDBytes},
		{out, "chat_id", "maxBytes", bus.MaxRefBytes},
		{out, "in_reply_to", "maxBytes", bus.MaxIDBytes},
		{out, "attachments", "maxItems", bus.MaxAttachments},
	} {
		if got := prop(c.doc, c.field, c.key); got != c.want {
			t.Errorf("%s.%s = %v, want %v", c.field, c.key, got, c.want)
		}
	}
	if !reflect.DeepEqual(in["$defs"], out["$defs"]) {
		t.Error("the attachment definitions of the two schemas differ")
	}
	// Every id has the one id pattern, and it forbids what bus.ValidID
	// forbids; the free texts forbid NUL.
	idPattern := prop(in, "id", "pattern").(string)
	for _, c := range []struct {
		doc   map[string]any
		field string
		want  string
	}{
		{in, "chat_id", idPattern}, {in, "thread_id", idPattern}, {in, "user_id", idPattern}, {in, "reply_to", idPattern},
		{out, "id", idPattern}, {out, "chat_id", idPattern}, {out, "thread_id", idPattern}, {out, "in_reply_to", idPattern},
		{in, "user_name", "^[^\x00]*$"}, {in, "text", "^[^\x00]*$"},
	} {
		if got := prop(c.doc, c.field, "pattern"); got != c.want {
			t.Errorf("%s.pattern = %q, want %q", c.field, got, c.want)
		}
	}
	re := regexp.MustCompile(idPattern)
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		if s := string(r); re.MatchString(s) != bus.ValidID(s) {
			t.Errorf("U+%04X: the id pattern says %v, bus.ValidID %v", r, re.MatchString(s), bus.ValidID(s))
		}
	}
}
