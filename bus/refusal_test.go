package bus_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/bus"
)

func TestRefusalFinal(t *testing.T) {
	subj := bus.Subjects{Prefix: "chat"}
	big := bus.Inbound{V: 1, ID: "m1", Channel: "tg", ChatID: "42", ThreadID: "t7", UserID: "u", Text: strings.Repeat("a", 70000),
		Meta: map[string]string{"room_id": "r9"}}
	badAtt := bus.Inbound{V: 1, ID: "m2", Channel: "tg", ChatID: "42", UserID: "u", Text: "see",
		Attachments: []bus.Attachment{{Kind: "image", Name: "ok.png"}, {Kind: "image", Name: "cat.png", Data: "!!not base64!!"}}}
	noID := bus.Inbound{V: 1, Channel: "tg", ChatID: "42", UserID: "u", Text: "hi"}
	for _, tc := range []struct {
		name, subject string
		in            bus.Inbound
		wantOK        bool
		replyTo       string
		want          []string
	}{
		{"too large", "chat.in.tg.42", big, true, "m1", []string{"too long", "70000 bytes", "limit is 65536 bytes"}},
		{"bad attachment", "chat.in.tg.42", badAtt, true, "m2", []string{`attachment 2 ("cat.png")`, "base64"}},
		{"no id", "chat.in.tg.42", noID, true, "", []string{`field "id" required`}},
		{"bad chat token", "chat.in.tg.a b", big, false, "", nil},
		{"bad channel", "chat.in.TG.42", big, false, "", nil},
		{"not inbound", "chat.out.tg.42", big, false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := json.Marshal(tc.in)
			_, perr := bus.ParseInbound(subj, tc.subject, data, 0)
			if perr == nil {
				t.Fatal("test envelope is valid")
			}
			out, to, ok := bus.RefusalFinal(subj, tc.subject, data, perr)
			if ok != tc.wantOK {
				t.Fatalf("addressable = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("refusal final invalid: %v", err)
			}
			if to != "chat.out.tg.42" || out.Kind != bus.KindError || !out.Final || out.InReplyTo != tc.replyTo || out.ChatID != "42" {
				t.Fatalf("refusal = %s %+v", to, out)
			}
			if tc.in.Meta["room_id"] != out.Meta["room_id"] || tc.in.ThreadID != out.ThreadID {
				t.Errorf("routing lost: meta %v thread %q", out.Meta, out.ThreadID)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.Text, w) {
					t.Errorf("text %q lacks %q", out.Text, w)
				}
			}
			again, _, _ := bus.RefusalFinal(subj, tc.subject, data, perr)
			if again.ID != out.ID || !strings.HasPrefix(out.ID, bus.RefusalIDPrefix) {
				t.Errorf("ids %q, %q: want one stable refusal id", out.ID, again.ID)
			}
		})
	}
}

// TestRefusalFinalControlCharacters: a message refused for a control
// character in an id is answered on its subject's chat with a valid
// outbound envelope: an id or thread that breaks the id rules is not copied
// into it, and a chat token that decodes to such a chat id makes the
// message unaddressable (dead-lettered only).
func TestRefusalFinalControlCharacters(t *testing.T) {
	subj := bus.Subjects{Prefix: "chat"}
	for _, tc := range []struct {
		name, subject, data    string
		wantOK                 bool
		replyTo, thread, words string
	}{
		{"NUL in id", "chat.in.tg.42", `{"v":1,"id":"m\u00001","channel":"tg","chat_id":"42","thread_id":"t7","user_id":"u","text":"hi"}`,
			true, "", "t7", `field "id" must not contain NUL, got U+0000 at byte 1`},
		{"ESC in thread", "chat.in.tg.42", `{"v":1,"id":"m2","channel":"tg","chat_id":"42","thread_id":"t\u001b","user_id":"u","text":"hi"}`,
			true, "m2", "", `field "thread_id" must not contain control characters`},
		{"NUL in chat id", "chat.in.tg.4%002", `{"v":1,"id":"m3","channel":"tg","chat_id":"4\u00002","user_id":"u","text":"hi"}`,
			false, "", "", ""},
		{"invalid UTF-8 chat token", "chat.in.tg.%FF", `{"v":1,"id":"m4","channel":"tg","chat_id":"x","user_id":"u","text":"hi"}`,
			false, "", "", ""},
		{"raw invalid UTF-8", "chat.in.tg.42", "{\"v\":1,\"id\":\"m\xff\",\"channel\":\"tg\",\"chat_id\":\"42\",\"user_id\":\"u\",\"text\":\"hi\"}",
			true, "", "", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, perr := bus.ParseInbound(subj, tc.subject, []byte(tc.data), 0)
			if perr == nil {
				t.Fatal("test envelope is valid")
			}
			out, to, ok := bus.RefusalFinal(subj, tc.subject, []byte(tc.data), perr)
			if ok != tc.wantOK {
				t.Fatalf("addressable = %v, want %v (%v)", ok, tc.wantOK, perr)
			}
			if !ok {
				return
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("refusal final invalid: %v", err)
			}
			if to != "chat.out.tg.42" || out.InReplyTo != tc.replyTo || out.ThreadID != tc.thread || !out.Final || out.Kind != bus.KindError {
				t.Fatalf("refusal = %s %+v", to, out)
			}
			if !strings.Contains(out.Text, tc.words) {
				t.Errorf("text %q lacks %q", out.Text, tc.words)
			}
		})
	}
}
