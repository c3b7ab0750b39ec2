package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct{ in, want string }{
		{"-100123456", "-100123456"},
		{"C024BE91L", "C024BE91L"},
		{"a_b-c", "a_b-c"},
		{"a.b", "a%2Eb"},
		{"user@host", "user%40host"},
		{"wxid 1", "wxid%201"},
		{"*", "%2A"},
		{">", "%3E"},
		{"%", "%25"},
		{"é", "%C3%A9"},
		{"\x00\xff", "%00%FF"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := bus.EncodeToken(tt.in); got != tt.want {
			t.Errorf("EncodeToken(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in == "" {
			continue
		}
		back, err := bus.DecodeToken(tt.want)
		if err != nil || back != tt.in {
			t.Errorf("DecodeToken(%q) = %q, %v, want %q", tt.want, back, err, tt.in)
		}
	}
}

func TestDecodeTokenRejects(t *testing.T) {
	tests := []struct{ name, tok string }{
		{"empty", ""},
		{"dot", "a.b"},
		{"space", "a b"},
		{"wildcard", "*"},
		{"truncated escape", "a%2"},
		{"bare percent", "%"},
		{"lower-case hex", "a%2e"},
		{"non-hex", "%ZZ"},
		{"escaped safe byte", "%41"},
		{"escaped dash", "%2D"},
		{"raw non-ASCII", "é"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bus.DecodeToken(tt.tok)
			if !errors.Is(err, bus.ErrInvalid) {
				t.Fatalf("DecodeToken(%q) = %q, %v, want ErrInvalid", tt.tok, got, err)
			}
		})
	}
}

func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range []string{"abc", "a.b", "%41", "é", "%C3%A9", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s != "" {
			enc := bus.EncodeToken(s)
			for i := 0; i < len(enc); i++ {
				c := enc[i]
				if c == '.' || c == '*' || c == '>' || c <= ' ' || c >= 0x7f {
					t.Fatalf("EncodeToken(%q) = %q contains %q", s, enc, c)
				}
			}
			dec, err := bus.DecodeToken(enc)
			if err != nil || dec != s {
				t.Fatalf("DecodeToken(EncodeToken(%q)) = %q, %v", s, dec, err)
			}
		}
		// Canonical form: whatever decodes must re-encode to the same token.
		if dec, err := bus.DecodeToken(s); err == nil {
			if enc := bus.EncodeToken(dec); enc != s {
				t.Fatalf("EncodeToken(DecodeToken(%q)) = %q", s, enc)
			}
		}
	})
}

func TestValidChannel(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"telegram", true},
		{"wechat-2", true},
		{"my_bridge", true},
		{"0", true},
		{strings.Repeat("a", 32), true},
		{strings.Repeat("a", 33), false},
		{"", false},
		{"Telegram", false},
		{"a.b", false},
		{"a b", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := bus.ValidChannel(tt.name); got != tt.want {
			t.Errorf("ValidChannel(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSubjects(t *testing.T) {
	s := bus.Subjects{Prefix: "chat"}
	checks := []struct{ got, want string }{
		{s.In("telegram", "-100123"), "chat.in.telegram.-100123"},
		{s.In("wechat", "wxid.abc@chatroom"), "chat.in.wechat.wxid%2Eabc%40chatroom"},
		{s.Out("slack", "C01/T9"), "chat.out.slack.C01%2FT9"},
		{s.Event("console", "demo"), "chat.event.console.demo"},
		{s.DLQ("wechat"), "chat.dlq.wechat"},
		{s.DLQ("Not Valid"), "chat.dlq._invalid"},
		{s.InAll(), "chat.in.>"},
		{s.OutAll(), "chat.out.>"},
		{s.EventAll(), "chat.event.>"},
		{s.DLQAll(), "chat.dlq.>"},
		{s.OutChannel("console"), "chat.out.console.>"},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("check %d: got %q, want %q", i, c.got, c.want)
		}
	}
	p := bus.Subjects{Prefix: "acme.bot"}
	if got, want := p.In("tg", "1"), "acme.bot.in.tg.1"; got != want {
		t.Errorf("In with dotted prefix = %q, want %q", got, want)
	}
}

func TestDLQFor(t *testing.T) {
	s := bus.Subjects{Prefix: "chat"}
	tests := []struct{ subject, want string }{
		{"chat.in.wechat.x", "chat.dlq.wechat"},
		{"chat.in.wechat.x.y", "chat.dlq.wechat"},
		{"chat.in.wechat", "chat.dlq.wechat"},
		{"chat.in.BAD.x", "chat.dlq._invalid"},
		{"other.in.wechat.x", "chat.dlq._invalid"},
		{"chat.out.wechat.x", "chat.dlq._invalid"},
	}
	for _, tt := range tests {
		if got := s.DLQFor(tt.subject); got != tt.want {
			t.Errorf("DLQFor(%q) = %q, want %q", tt.subject, got, tt.want)
		}
	}
}

func TestParseIn(t *testing.T) {
	s := bus.Subjects{Prefix: "chat"}
	ch, chat, err := s.ParseIn("chat.in.wechat.wxid%2Eabc%40chatroom")
	if err != nil || ch != "wechat" || chat != "wxid.abc@chatroom" {
		t.Fatalf("ParseIn = %q, %q, %v", ch, chat, err)
	}
	d := bus.Subjects{Prefix: "acme.bot"}
	if ch, chat, err := d.ParseIn(d.In("tg", "-5")); err != nil || ch != "tg" || chat != "-5" {
		t.Fatalf("ParseIn with dotted prefix = %q, %q, %v", ch, chat, err)
	}

	bad := []struct{ name, subject, wantInErr string }{
		{"other prefix", "other.in.tg.1", "must start with"},
		{"out subject", "chat.out.tg.1", "must start with"},
		{"too few tokens", "chat.in.tg", "shape"},
		{"too many tokens", "chat.in.tg.1.2", "shape"},
		{"empty chat token", "chat.in.tg.", "chat token"},
		{"bad channel", "chat.in.TG.1", "channel token"},
		{"empty channel", "chat.in..1", "channel token"},
		{"non-canonical chat", "chat.in.tg.%41", "chat token"},
		{"prefix only", "chat", "must start with"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.ParseIn(tt.subject)
			if !errors.Is(err, bus.ErrInvalid) {
				t.Fatalf("ParseIn(%q) error = %v, want ErrInvalid", tt.subject, err)
			}
			if !strings.Contains(err.Error(), tt.wantInErr) || !strings.Contains(err.Error(), tt.subject) {
				t.Errorf("ParseIn(%q) error = %q, want it to name the subject and contain %q", tt.subject, err, tt.wantInErr)
			}
		})
	}
}
