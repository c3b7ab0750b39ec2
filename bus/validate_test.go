package bus_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-chat/switchboard/bus"
)

var subj = bus.Subjects{Prefix: "chat"}

const testSubject = "chat.in.wechat.room%401"

// validEnvelope returns a valid inbound envelope for testSubject as a map, so
// that tests can break one field at a time.
func validEnvelope() map[string]any {
	return map[string]any{
		"v":         1,
		"id":        "m1",
		"channel":   "wechat",
		"chat_id":   "room@1",
		"thread_id": "t1",
		"user_id":   "u1",
		"user_name": "Ann",
		"text":      "hello",
		"attachments": []any{
			map[string]any{"kind": "image", "data": base64.StdEncoding.EncodeToString([]byte("png")), "mime": "image/png", "name": "a.png", "size": 3},
			map[string]any{"kind": "file", "url": "https://example.com/f.pdf"},
		},
		"is_group":  true,
		"mentioned": true,
		"reply_to":  "m0",
		"ts":        "2026-03-01T10:00:00+08:00",
		"meta":      map[string]any{"bridge_msg": "42"},
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseInboundValid(t *testing.T) {
	in, err := bus.ParseInbound(subj, testSubject, mustJSON(t, validEnvelope()), 0)
	if err != nil {
		t.Fatalf("ParseInbound: %v", err)
	}
	want := &bus.Inbound{
		V: 1, ID: "m1", Channel: "wechat", ChatID: "room@1", ThreadID: "t1",
		UserID: "u1", UserName: "Ann", Text: "hello",
		Attachments: []bus.Attachment{
			{Kind: "image", Data: "cG5n", MIME: "image/png", Name: "a.png", Size: 3},
			{Kind: "file", URL: "https://example.com/f.pdf"},
		},
		IsGroup: true, Mentioned: true, ReplyTo: "m0", TS: "2026-03-01T10:00:00+08:00",
		Meta: map[string]string{"bridge_msg": "42"},
	}
	if diff := cmp.Diff(want, in); diff != "" {
		t.Errorf("ParseInbound mismatch (-want +got):\n%s", diff)
	}
	if got := in.SessionKey(); got != "wechat/room@1/t1" {
		t.Errorf("SessionKey = %q", got)
	}
}

func TestParseInboundMinimalAndUnknownFields(t *testing.T) {
	tests := []struct{ name, data string }{
		{"minimal", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","text":"hi"}`},
		{"unknown fields ignored", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","text":"hi","future":{"x":[1,2]},"priority":3}`},
		{"attachment without text", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","attachments":[{"kind":"audio","url":"u"}]}`},
		{"text exactly at limit", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","text":"0123456789"}`},
		{"ts with fraction and Z", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","text":"x","ts":"2026-03-01T02:00:00.123Z"}`},
		{"escaped unicode text", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","text":"\u4f60\u597d"}`},
		{"text and user_name keep tabs, line breaks and ESC", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","user_name":"Ann\nB","text":"a\tb\r\nc\u001b"}`},
		{"ids of any script, no-break space just above C1", `{"v":1,"id":"张三\u00a0\ud83d\ude00","channel":"wechat","chat_id":"room@1","user_id":"用户","thread_id":"\u00a0","reply_to":"ü","text":"x"}`},
		{"attachment name and meta keep line breaks", `{"v":1,"id":"a","channel":"wechat","chat_id":"room@1","user_id":"u","attachments":[{"kind":"file","url":"u","name":"a\nb"}],"meta":{"k\n":"v\t"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := bus.ParseInbound(subj, testSubject, []byte(tt.data), 10); err != nil {
				t.Fatalf("ParseInbound: %v", err)
			}
		})
	}
}

func TestParseInboundRejects(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name      string
		subject   string // default testSubject
		raw       string // used instead of the mutated map when set
		mutate    func(m map[string]any)
		wantErr   error
		wantField string // FieldError.Field, "" when not a field error
		wantText  string // substring of the message
	}{
		{name: "subject shape", subject: "chat.in.wechat", wantErr: bus.ErrInvalid, wantText: "subject"},
		{name: "subject chat token", subject: "chat.in.wechat.a b", wantErr: bus.ErrInvalid, wantText: "chat token"},
		{name: "invalid UTF-8", raw: "{\"v\":1,\"text\":\"\xff\"}", wantErr: bus.ErrInvalid, wantText: "UTF-8"},
		{name: "not JSON", raw: `{"v":1,`, wantErr: bus.ErrInvalid, wantText: "JSON"},
		{name: "trailing data", raw: `{"v":1}{"v":1}`, wantErr: bus.ErrInvalid, wantText: "JSON"},
		{name: "not an object", raw: `[1,2]`, wantErr: bus.ErrInvalid, wantText: "JSON object"},
		{name: "null", raw: `null`, wantErr: bus.ErrInvalid, wantField: "v"},
		{name: "v wrong type", mutate: func(m map[string]any) { m["v"] = "1" }, wantErr: bus.ErrInvalid, wantField: "v"},
		{name: "v missing", mutate: func(m map[string]any) { delete(m, "v") }, wantErr: bus.ErrInvalid, wantField: "v", wantText: "must be 1, got 0"},
		{name: "v is 2", mutate: func(m map[string]any) { m["v"] = 2 }, wantErr: bus.ErrInvalid, wantField: "v", wantText: `bus: field "v": must be 1, got 2: invalid envelope`},
		{name: "id missing", mutate: func(m map[string]any) { delete(m, "id") }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "required"},
		{name: "id too long", mutate: func(m map[string]any) { m["id"] = long(257) }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "at most 256"},
		{name: "id wrong type", mutate: func(m map[string]any) { m["id"] = 5 }, wantErr: bus.ErrInvalid, wantField: "id"},
		{name: "channel missing", mutate: func(m map[string]any) { delete(m, "channel") }, wantErr: bus.ErrInvalid, wantField: "channel", wantText: "required"},
		{name: "channel invalid", mutate: func(m map[string]any) { m["channel"] = "WeChat" }, wantErr: bus.ErrInvalid, wantField: "channel", wantText: "^[a-z0-9_-]{1,32}$"},
		{name: "channel mismatch", mutate: func(m map[string]any) { m["channel"] = "slack" }, wantErr: bus.ErrInvalid, wantField: "channel", wantText: "subject's channel token"},
		{name: "chat_id missing", mutate: func(m map[string]any) { delete(m, "chat_id") }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "required"},
		{name: "chat_id mismatch", mutate: func(m map[string]any) { m["chat_id"] = "room@2" }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "subject's chat token"},
		{name: "chat_id too long", subject: "chat.in.wechat." + long(513), mutate: func(m map[string]any) { m["chat_id"] = long(513) }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "at most 512"},
		{name: "thread_id too long", mutate: func(m map[string]any) { m["thread_id"] = long(513) }, wantErr: bus.ErrInvalid, wantField: "thread_id"},
		{name: "user_id missing", mutate: func(m map[string]any) { m["user_id"] = "" }, wantErr: bus.ErrInvalid, wantField: "user_id", wantText: "required"},
		{name: "user_id too long", mutate: func(m map[string]any) { m["user_id"] = long(513) }, wantErr: bus.ErrInvalid, wantField: "user_id"},
		{name: "user_name too long", mutate: func(m map[string]any) { m["user_name"] = long(513) }, wantErr: bus.ErrInvalid, wantField: "user_name"},
		{name: "reply_to too long", mutate: func(m map[string]any) { m["reply_to"] = long(257) }, wantErr: bus.ErrInvalid, wantField: "reply_to"},
		{name: "no text no attachments", mutate: func(m map[string]any) { delete(m, "text"); delete(m, "attachments") }, wantErr: bus.ErrInvalid, wantField: "text", wantText: "required unless attachments"},
		{name: "no text empty attachments", mutate: func(m map[string]any) { m["text"] = ""; m["attachments"] = []any{} }, wantErr: bus.ErrInvalid, wantField: "text"},
		{name: "text too large", mutate: func(m map[string]any) { m["text"] = long(101) }, wantErr: bus.ErrTooLarge, wantField: "text", wantText: "at most 100 bytes, got 101"},
		{name: "is_group wrong type", mutate: func(m map[string]any) { m["is_group"] = "yes" }, wantErr: bus.ErrInvalid, wantField: "is_group"},
		{name: "too many attachments", mutate: func(m map[string]any) {
			a := make([]any, 33)
			for i := range a {
				a[i] = map[string]any{"kind": "file", "url": "u"}
			}
			m["attachments"] = a
		}, wantErr: bus.ErrInvalid, wantField: "attachments", wantText: "at most 32"},
		{name: "attachment kind missing", mutate: func(m map[string]any) { m["attachments"] = []any{map[string]any{"url": "u"}} }, wantErr: bus.ErrInvalid, wantField: "attachments[0].kind", wantText: "required"},
		{name: "attachment kind unknown", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u"}, map[string]any{"kind": "video", "url": "u"}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[1].kind", wantText: `got "video"`},
		{name: "attachment bad base64", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "image", "data": "not base64!"}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].data", wantText: "base64"},
		{name: "attachment url base64", mutate: func(m map[string]any) { m["attachments"] = []any{map[string]any{"kind": "image", "data": "cG5n_-"}} }, wantErr: bus.ErrInvalid, wantField: "attachments[0].data"},
		{name: "attachment negative size", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u", "size": -1}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].size"},
		{name: "attachment name too long", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u", "name": long(1025)}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].name"},
		{name: "attachment mime too long", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u", "mime": long(256)}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].mime"},
		{name: "attachment url too long", mutate: func(m map[string]any) { m["attachments"] = []any{map[string]any{"kind": "file", "url": long(8193)}} }, wantErr: bus.ErrInvalid, wantField: "attachments[0].url"},
		{name: "attachment kind wrong type", mutate: func(m map[string]any) { m["attachments"] = []any{map[string]any{"kind": 1}} }, wantErr: bus.ErrInvalid, wantText: "kind"},
		{name: "ts not RFC 3339", mutate: func(m map[string]any) { m["ts"] = "2026-03-01 10:00:00" }, wantErr: bus.ErrInvalid, wantField: "ts", wantText: "RFC 3339"},
		{name: "ts unix number", mutate: func(m map[string]any) { m["ts"] = 1700000000 }, wantErr: bus.ErrInvalid, wantField: "ts"},
		{name: "meta too many keys", mutate: func(m map[string]any) {
			meta := map[string]any{}
			for i := range 33 {
				meta[fmt.Sprint("k", i)] = "v"
			}
			m["meta"] = meta
		}, wantErr: bus.ErrInvalid, wantField: "meta", wantText: "at most 32 keys"},
		{name: "meta too large", mutate: func(m map[string]any) { m["meta"] = map[string]any{"k": long(4096)} }, wantErr: bus.ErrInvalid, wantField: "meta", wantText: "4096 bytes"},
		{name: "meta value not string", mutate: func(m map[string]any) { m["meta"] = map[string]any{"k": 1} }, wantErr: bus.ErrInvalid, wantText: "meta"},
		// Control characters in ids, NUL in free text (the stores' keys and
		// files refuse them; terminals would obey them).
		{name: "id with NUL", mutate: func(m map[string]any) { m["id"] = "m\x001" }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "must not contain NUL, got U+0000 at byte 1"},
		{name: "id with ESC", mutate: func(m map[string]any) { m["id"] = "m1\x1b[2J" }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "control characters, got U+001B at byte 2"},
		{name: "id with DEL", mutate: func(m map[string]any) { m["id"] = "m\x7f" }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "U+007F"},
		{name: "id with C1 NEL", mutate: func(m map[string]any) { m["id"] = "m\u0085" }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "U+0085"},
		{name: "id with C1 CSI", mutate: func(m map[string]any) { m["id"] = "\u009b31m" }, wantErr: bus.ErrInvalid, wantField: "id", wantText: "U+009B at byte 0"},
		{name: "chat_id with NUL", subject: "chat.in.wechat.room%00", mutate: func(m map[string]any) { m["chat_id"] = "room\x00" }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "NUL"},
		{name: "chat_id with newline", subject: "chat.in.wechat.a%0Ab", mutate: func(m map[string]any) { m["chat_id"] = "a\nb" }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "U+000A"},
		{name: "chat token of invalid UTF-8", subject: "chat.in.wechat.%FF", mutate: func(m map[string]any) { m["chat_id"] = "\uFFFD" }, wantErr: bus.ErrInvalid, wantField: "chat_id", wantText: "subject's chat token"},
		{name: "thread_id with NUL", mutate: func(m map[string]any) { m["thread_id"] = "\x00" }, wantErr: bus.ErrInvalid, wantField: "thread_id", wantText: "NUL"},
		{name: "thread_id with tab", mutate: func(m map[string]any) { m["thread_id"] = "t\t1" }, wantErr: bus.ErrInvalid, wantField: "thread_id", wantText: "U+0009"},
		{name: "user_id with CR", mutate: func(m map[string]any) { m["user_id"] = "u\r1" }, wantErr: bus.ErrInvalid, wantField: "user_id", wantText: "U+000D"},
		{name: "reply_to with C1", mutate: func(m map[string]any) { m["reply_to"] = "\u0080" }, wantErr: bus.ErrInvalid, wantField: "reply_to", wantText: "U+0080"},
		{name: "user_name with NUL", mutate: func(m map[string]any) { m["user_name"] = "Ann\x00" }, wantErr: bus.ErrInvalid, wantField: "user_name", wantText: "NUL"},
		{name: "text with NUL", mutate: func(m map[string]any) { m["text"] = "hi\x00there" }, wantErr: bus.ErrInvalid, wantField: "text", wantText: "must not contain NUL, got U+0000 at byte 2"},
		{name: "attachment url with newline", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "https://x/\nHost: evil"}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].url", wantText: "U+000A"},
		{name: "attachment mime with NUL", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u", "mime": "image/png\x00"}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].mime", wantText: "NUL"},
		{name: "attachment name with NUL", mutate: func(m map[string]any) {
			m["attachments"] = []any{map[string]any{"kind": "file", "url": "u", "name": "a\x00.png"}}
		}, wantErr: bus.ErrInvalid, wantField: "attachments[0].name", wantText: "NUL"},
		{name: "meta key with NUL", mutate: func(m map[string]any) { m["meta"] = map[string]any{"k\x00": "v"} }, wantErr: bus.ErrInvalid, wantField: "meta", wantText: `key "k\x00" must not contain NUL`},
		{name: "meta value with NUL", mutate: func(m map[string]any) { m["meta"] = map[string]any{"b": "v\x00", "a": "ok"} }, wantErr: bus.ErrInvalid, wantField: "meta", wantText: `value of "b" must not contain NUL`},
		{name: "lone surrogate is replaced, NUL is not", raw: `{"v":1,"id":"\ud800\u0000","channel":"wechat","chat_id":"room@1","user_id":"u","text":"x"}`, wantErr: bus.ErrInvalid, wantField: "id", wantText: "U+0000 at byte 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := tt.subject
			if subject == "" {
				subject = testSubject
			}
			data := []byte(tt.raw)
			if tt.raw == "" {
				m := validEnvelope()
				if tt.mutate != nil {
					tt.mutate(m)
				}
				data = mustJSON(t, m)
			}
			in, err := bus.ParseInbound(subj, subject, data, 100)
			if err == nil {
				t.Fatalf("ParseInbound accepted %+v, want error", in)
			}
			if in != nil {
				t.Errorf("ParseInbound returned %+v with error", in)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want errors.Is %v", err, tt.wantErr)
			}
			if tt.wantErr == bus.ErrTooLarge && errors.Is(err, bus.ErrInvalid) {
				t.Errorf("error = %v is both too large and invalid", err)
			}
			if tt.wantField != "" {
				var fe *bus.FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Errorf("error = %v, want a FieldError for field %q", err, tt.wantField)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("field %q", tt.wantField)) {
					t.Errorf("error = %q does not name field %q", err, tt.wantField)
				}
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantText)
			}
		})
	}
}

func TestParseInboundDefaultLimit(t *testing.T) {
	m := validEnvelope()
	m["text"] = strings.Repeat("x", bus.DefaultMaxTextBytes)
	if _, err := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 0); err != nil {
		t.Fatalf("text at the default limit: %v", err)
	}
	m["text"] = strings.Repeat("x", bus.DefaultMaxTextBytes+1)
	if _, err := bus.ParseInbound(subj, testSubject, mustJSON(t, m), -1); !errors.Is(err, bus.ErrTooLarge) {
		t.Fatalf("text over the default limit: error = %v, want ErrTooLarge", err)
	}
}

func validOutbound() bus.Outbound {
	return bus.Outbound{V: 1, ID: "o1", Channel: "wechat", ChatID: "room@1", InReplyTo: "m1", Kind: bus.KindReply, Text: "hi", Seq: 1, Final: true}
}

func TestOutboundValidate(t *testing.T) {
	for _, kind := range []string{bus.KindReply, bus.KindDelta, bus.KindTyping, bus.KindNotice, bus.KindError} {
		o := validOutbound()
		o.Kind = kind
		if err := o.Validate(); err != nil {
			t.Errorf("kind %q: %v", kind, err)
		}
	}
	tests := []struct {
		name   string
		mutate func(o *bus.Outbound)
		field  string
	}{
		{"v", func(o *bus.Outbound) { o.V = 0 }, "v"},
		{"id missing", func(o *bus.Outbound) { o.ID = "" }, "id"},
		{"id too long", func(o *bus.Outbound) { o.ID = strings.Repeat("x", 257) }, "id"},
		{"channel missing", func(o *bus.Outbound) { o.Channel = "" }, "channel"},
		{"channel invalid", func(o *bus.Outbound) { o.Channel = "a.b" }, "channel"},
		{"chat_id missing", func(o *bus.Outbound) { o.ChatID = "" }, "chat_id"},
		{"thread_id too long", func(o *bus.Outbound) { o.ThreadID = strings.Repeat("x", 513) }, "thread_id"},
		{"in_reply_to too long", func(o *bus.Outbound) { o.InReplyTo = strings.Repeat("x", 257) }, "in_reply_to"},
		{"kind missing", func(o *bus.Outbound) { o.Kind = "" }, "kind"},
		{"kind unknown", func(o *bus.Outbound) { o.Kind = "final" }, "kind"},
		{"seq negative", func(o *bus.Outbound) { o.Seq = -1 }, "seq"},
		{"attachment kind", func(o *bus.Outbound) { o.Attachments = []bus.Attachment{{Kind: "pdf"}} }, "attachments[0].kind"},
		{"id with NUL", func(o *bus.Outbound) { o.ID = "o\x00" }, "id"},
		{"id invalid UTF-8", func(o *bus.Outbound) { o.ID = "o\xff" }, "id"},
		{"chat_id with C1", func(o *bus.Outbound) { o.ChatID = "r\u009b" }, "chat_id"},
		{"thread_id with newline", func(o *bus.Outbound) { o.ThreadID = "t\n" }, "thread_id"},
		{"in_reply_to with DEL", func(o *bus.Outbound) { o.InReplyTo = "m\x7f" }, "in_reply_to"},
		{"text invalid UTF-8", func(o *bus.Outbound) { o.Text = "caf\xe9" }, "text"},
		{"meta invalid UTF-8", func(o *bus.Outbound) { o.Meta = map[string]string{"k": "\xc3"} }, "meta"},
		{"attachment name with NUL", func(o *bus.Outbound) { o.Attachments = []bus.Attachment{{Kind: "file", Name: "a\x00"}} }, "attachments[0].name"},
		{"attachment url with control", func(o *bus.Outbound) { o.Attachments = []bus.Attachment{{Kind: "file", URL: "u\x1b"}} }, "attachments[0].url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOutbound()
			tt.mutate(&o)
			err := o.Validate()
			var fe *bus.FieldError
			if !errors.Is(err, bus.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("Validate() = %v, want ErrInvalid for field %q", err, tt.field)
			}
		})
	}
}

func TestOutboundValidateKeepsText(t *testing.T) {
	o := validOutbound()
	o.Text = "line 1\nline 2\t\x1b[1mbold\x1b[0m"
	o.Meta = map[string]string{"k\n": "v\x00"}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate() = %v: outbound text and meta need only be valid UTF-8", err)
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"": true, "m1": true, "wxid_abc@chatroom": true, "张三": true, "a b": true, "\u00a0": true, "😀": true,
		"\x00": false, "a\tb": false, "a\nb": false, "\x1b[2J": false, "\x7f": false, "\u0080": false, "\u009f": false, "\xff": false, "a\xc3": false,
	} {
		if got := bus.ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestReplyTo(t *testing.T) {
	in := &bus.Inbound{V: 1, ID: "m1", Channel: "wechat", ChatID: "room@1", ThreadID: "t", UserID: "u", Text: "hi", Meta: map[string]string{"k": "v"}}
	out := bus.ReplyTo(in)
	want := bus.Outbound{V: 1, Channel: "wechat", ChatID: "room@1", ThreadID: "t", InReplyTo: "m1", Meta: map[string]string{"k": "v"}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("ReplyTo mismatch (-want +got):\n%s", diff)
	}
	out.Meta["k"] = "changed"
	if in.Meta["k"] != "v" {
		t.Errorf("ReplyTo aliases the inbound meta map")
	}
	if got := bus.ReplyTo(&bus.Inbound{ID: "x"}).Meta; got != nil {
		t.Errorf("ReplyTo with nil meta = %v, want nil", got)
	}
}

func TestOutboundJSON(t *testing.T) {
	o := validOutbound()
	o.Meta = map[string]string{"k": "v"}
	got := string(mustJSON(t, o))
	want := `{"v":1,"id":"o1","channel":"wechat","chat_id":"room@1","in_reply_to":"m1","kind":"reply","text":"hi","seq":1,"final":true,"meta":{"k":"v"}}`
	if got != want {
		t.Errorf("json = %s\nwant   %s", got, want)
	}
}

// FuzzParseInbound checks that ParseInbound never panics, that what it
// accepts obeys the rules it documents, and that an accepted envelope, encoded
// again, is accepted again with the same contents.
func FuzzParseInbound(f *testing.F) {
	f.Add(testSubject, mustJSON(f, validEnvelope()))
	f.Add("chat.in.console.demo", []byte(`{"v":1,"id":"m1","channel":"console","chat_id":"demo","user_id":"me","text":"hello"}`))
	f.Add("chat.in.console.a%2Eb", []byte(`{"v":1,"id":"m1","channel":"console","chat_id":"a.b","user_id":"me","attachments":[{"kind":"file","data":"AA=="}],"meta":{"":""}}`))
	f.Add("chat.in.console.x", []byte(`{"v":1,"id":"i","channel":"console","chat_id":"x","user_id":"u","text":"t","meta":{},"attachments":[]}`))
	f.Add("chat.in.console.x", []byte(`{"v":2}`))
	f.Add("chat.in.console.x", []byte("\xff"))
	f.Add("chat.in.console.a%00", []byte(`{"v":1,"id":"i\u0000","channel":"console","chat_id":"a\u0000","user_id":"u","text":"t\u0000"}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		in, err := bus.ParseInbound(subj, subject, data, 1024)
		if err != nil {
			if in != nil {
				t.Fatalf("non-nil Inbound with error %v", err)
			}
			if !errors.Is(err, bus.ErrInvalid) && !errors.Is(err, bus.ErrTooLarge) {
				t.Fatalf("error %v wraps neither ErrInvalid nor ErrTooLarge", err)
			}
			return
		}
		if in.V != 1 || in.ID == "" || in.UserID == "" || len(in.Text) > 1024 || (in.Text == "" && len(in.Attachments) == 0) {
			t.Fatalf("accepted an envelope that breaks a rule: %+v", in)
		}
		for _, id := range []string{in.ID, in.ChatID, in.ThreadID, in.UserID, in.ReplyTo} {
			if !bus.ValidID(id) {
				t.Fatalf("accepted an id with a control character or invalid UTF-8: %q", id)
			}
		}
		if strings.ContainsRune(in.Text, 0) || strings.ContainsRune(in.UserName, 0) {
			t.Fatalf("accepted a NUL in text or user_name: %+v", in)
		}
		if got := subj.In(in.Channel, in.ChatID); got != subject {
			t.Fatalf("accepted %+v on %q, but its subject is %q", in, subject, got)
		}
		again, err := bus.ParseInbound(subj, subject, mustJSON(t, in), 1024)
		if err != nil {
			t.Fatalf("re-encoded envelope rejected: %v", err)
		}
		if diff := cmp.Diff(in, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("re-encoded envelope differs (-first +second):\n%s", diff)
		}
	})
}

func BenchmarkParseInbound(b *testing.B) {
	data := []byte(`{"v":1,"id":"1234567","channel":"telegram","chat_id":"-100123456","user_id":"42","user_name":"Ann","text":"What's the weather like in Paris tomorrow? I need to know whether to bring an umbrella.","is_group":true,"mentioned":true,"ts":"2026-03-01T10:00:00Z","meta":{"message_id":"991"}}`)
	subject := subj.In("telegram", "-100123456")
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := bus.ParseInbound(subj, subject, data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOutboundEncode(b *testing.B) {
	o := validOutbound()
	o.Text = strings.Repeat("The weather in Paris tomorrow: light rain, 14°C. ", 8)
	o.Meta = map[string]string{"message_id": "991"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(&o); err != nil {
			b.Fatal(err)
		}
	}
}
