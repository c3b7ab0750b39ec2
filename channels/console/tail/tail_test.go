package tail

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTailLineFormat(t *testing.T) {
	p := Printer{Subjects: bus.Subjects{Prefix: "chat"}, MaxTextBytes: bus.DefaultMaxTextBytes}
	at := time.Date(2026, 3, 1, 10, 4, 5, 120_000_000, time.UTC)
	long := strings.Repeat("é", 150)
	tests := []struct {
		subject, data, want string
	}{
		{"chat.in.wechat.room%40x", `{"v":1,"id":"7","channel":"wechat","chat_id":"room@x","thread_id":"t1","user_id":"u","user_name":"Ann","text":"a\nb","reply_to":"6"}`,
			`10:04:05.120 IN    wechat/room@x/t1     #7 Ann: "a↵b"  reply to #6`},
		{"chat.in.wechat.x", `not json`, `10:04:05.120 IN    chat.in.wechat.x     not an envelope: "not json"`},
		{"chat.in.wechat.x", `{"v":1,"id":"8","channel":"wechat","chat_id":"y","user_id":"u","text":"hi"}`,
			`10:04:05.120 IN    chat.in.wechat.x     #8 u: "hi"  INVALID: bus: field "chat_id": encoded as "y", must equal the subject's chat token "x": invalid envelope`},
		{"chat.out.console.demo", `{"v":1,"id":"o","channel":"console","chat_id":"demo","in_reply_to":"m1","kind":"delta","text":"` + long + `","seq":2}`,
			`10:04:05.120 OUT   console/demo         delta    ↩m1 seq 2 "` + strings.Repeat("é", 99) + `…"`},
		{"chat.out.console.demo", `{"v":1,"id":"o","channel":"console","chat_id":"demo","kind":"notice","text":"proactive","seq":0,"final":true,"attachments":[{"kind":"file"},{"kind":"image"}]}`,
			`10:04:05.120 OUT   console/demo         notice   seq 0 final "proactive"  +2 attachments`},
		{"chat.event.console.demo", `{"v":1,"type":"tool_call","channel":"console","chat_id":"demo","in_reply_to":"m1","data":{"name":"read_file"}}`,
			`10:04:05.120 EVENT console/demo         tool_call ↩m1 {"name":"read_file"}`},
		{"chat.dlq._invalid", `{"v":1,"reason":"bad","subject":"chat.in.x","payload":"AAE=","payload_base64":true,"size":2}`,
			`10:04:05.120 DLQ   _invalid             bad (chat.in.x, 2 bytes) "(base64) AAE="`},
		{"other.subject", `x`, `10:04:05.120 ?     other.subject "x"`},
	}
	for _, tt := range tests {
		if got := p.Line(at, &nats.Msg{Subject: tt.subject, Data: []byte(tt.data)}); got != tt.want {
			t.Errorf("Line(%s)\n got %q\nwant %q", tt.subject, got, tt.want)
		}
	}
}
