package bus_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/bus"
)

// TestProtocolDocExamples keeps docs/bus-protocol.md consistent with the
// code: the chat-id encoding table, the inbound example and the error
// messages it quotes.
func TestProtocolDocExamples(t *testing.T) {
	raw, err := os.ReadFile("../docs/bus-protocol.md")
	if err != nil {
		t.Fatalf("read protocol doc: %v", err)
	}
	doc := string(raw)

	// §2.2 encoding table.
	row := regexp.MustCompile("(?m)^\\| `([^`]*)` \\| `([^`]*)` \\|$")
	rows := row.FindAllStringSubmatch(doc, -1)
	if len(rows) < 5 {
		t.Fatalf("found %d encoding table rows, want the table", len(rows))
	}
	for _, r := range rows {
		if got := bus.EncodeToken(r[1]); got != r[2] {
			t.Errorf("doc says %q encodes as %q, EncodeToken gives %q", r[1], r[2], got)
		}
	}

	// §3 example envelope and its subject.
	start := strings.Index(doc, "Example:\n\n```json\n")
	if start < 0 {
		t.Fatal("inbound example not found")
	}
	body := doc[start+len("Example:\n\n```json\n"):]
	body = body[:strings.Index(body, "```")]
	subject := regexp.MustCompile("published on `([^`]+)` with header\n`Nats-Msg-Id: ([^`]+)`").FindStringSubmatch(doc)
	if subject == nil {
		t.Fatal("example subject not found")
	}
	subj := bus.Subjects{Prefix: "chat"}
	in, err := bus.ParseInbound(subj, subject[1], []byte(body), 0)
	if err != nil {
		t.Fatalf("doc example rejected: %v", err)
	}
	if in.DedupKey() != subject[2] {
		t.Errorf("doc header %q, DedupKey %q", subject[2], in.DedupKey())
	}

	// §3 quoted errors.
	m := validEnvelope()
	m["chat_id"] = "room@2"
	m["channel"] = "wechat"
	_, errChat := bus.ParseInbound(subj, "chat.in.wechat.room%401", mustJSON(t, m), 0)
	m = validEnvelope()
	m["v"] = 2
	_, errV := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 0)
	m = validEnvelope()
	m["text"] = strings.Repeat("x", 70000)
	_, errText := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 65536)
	_, _, errSubj := subj.ParseIn("chat.in.wechat")
	for _, err := range []error{errChat, errV, errText, errSubj} {
		if err == nil || !strings.Contains(doc, "\n"+err.Error()+"\n") {
			t.Errorf("doc does not quote the error %v", err)
		}
	}

	// §12 outbound examples: valid envelopes, one final, seq increasing.
	finals, lastSeq := 0, 0
	for _, line := range regexp.MustCompile(`(?m)^\{"v":1,"id":"m1\.[^\n]*$`).FindAllString(doc, -1) {
		var o bus.Outbound
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("doc outbound example %s: %v", line, err)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("doc outbound example %s: %v", line, err)
		}
		if o.Seq <= lastSeq {
			t.Errorf("doc outbound example seq %d after %d", o.Seq, lastSeq)
		}
		lastSeq = o.Seq
		if o.Final {
			finals++
		}
	}
	if finals != 1 || lastSeq < 3 {
		t.Errorf("doc outbound examples: %d finals, last seq %d; want one final after deltas", finals, lastSeq)
	}

	// §9 dead-letter example.
	rec := bus.NewDLQRecord("chat.in.wechat.room1", []byte(`{"v":2,"id":"9"}`), errV, time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC))
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "\n"+string(b)+"\n") {
		t.Errorf("doc does not show the DLQ record %s", b)
	}
}

// TestProtocolDocListsEventsAndCommands keeps the lists of docs/bus-protocol.md
// in sync with the code both ways: the event types of §10 are exactly the
// string constants named Event* of package bus and of the agent loop (what
// the runtime emits), and the commands of §6 exactly the cmd* constants the
// runtime accepts (agent/commands.go). The constants are read from the
// source, so a new one cannot be forgotten here either.
func TestProtocolDocListsEventsAndCommands(t *testing.T) {
	raw, err := os.ReadFile("../docs/bus-protocol.md")
	if err != nil {
		t.Fatalf("read protocol doc: %v", err)
	}
	doc := string(raw)
	code := map[string]bool{}
	for _, file := range []string{"event.go", "../agent/loop/loop.go"} {
		maps.Copy(code, stringConsts(t, file, "Event"))
	}
	typeRow := regexp.MustCompile("(?m)^\\| `type` \\| string \\| (.*) \\|$").FindStringSubmatch(doc)
	if typeRow == nil {
		t.Fatal("§10: the row of field `type` not found")
	}
	compare(t, "§10 event types", backticked(typeRow[1]), code)

	cmds := stringConsts(t, "../agent/commands.go", "cmd")
	delete(cmds, "")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `/([a-z]+)[^`]*` \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	compare(t, "§6 commands", documented, cmds)

	kinds := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\| [^|]+ \\| [^|]+ \\|$").FindAllStringSubmatch(section(t, doc, "### 4.1 Kinds"), -1) {
		kinds[m[1]] = true
	}
	compare(t, "§4.1 outbound kinds", kinds, stringConsts(t, "bus.go", "Kind"))
}

// section returns the text of doc from the heading to the next heading.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("heading %q not found", heading)
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n#"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// stringConsts returns the values of the string constants of file whose
// names start with prefix.
func stringConsts(t *testing.T, file, prefix string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	vals := map[string]bool{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					vals[v] = true
				}
			}
		}
	}
	if len(vals) == 0 {
		t.Fatalf("%s: no %s* string constants", file, prefix)
	}
	return vals
}

func backticked(s string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(s, -1) {
		out[m[1]] = true
	}
	return out
}

func compare(t *testing.T, what string, doc, code map[string]bool) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(code)) {
		if !doc[k] {
			t.Errorf("%s: %q is in the code but not documented", what, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if !code[k] {
			t.Errorf("%s: %q is documented but not in the code", what, k)
		}
	}
}

// TestProtocolDocRefusalExamples: the answers to refused messages quoted
// in §9.1 are what RefusalFinal writes.
func TestProtocolDocRefusalExamples(t *testing.T) {
	raw, err := os.ReadFile("../docs/bus-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	subj := bus.Subjects{Prefix: "chat"}
	big := validEnvelope()
	big["text"] = strings.Repeat("x", 70000)
	att := validEnvelope()
	att["attachments"] = []map[string]any{{"kind": "image", "name": "cat.png", "data": "cat!"}}
	nul := validEnvelope()
	nul["id"] = "4711\x00"
	esc := validEnvelope()
	esc["thread_id"] = "\x1b[2J"
	for _, m := range []map[string]any{big, att, nul} {
		data := mustJSON(t, m)
		_, perr := bus.ParseInbound(subj, testSubject, data, 65536)
		out, _, ok := bus.RefusalFinal(subj, testSubject, data, perr)
		if !ok || !strings.Contains(string(raw), "\n    "+out.Text+"\n") {
			t.Errorf("§9.1 does not quote the answer %q", out.Text)
		}
	}
	if text := bus.RefusalText(fmt.Errorf("%w after 10 deliveries: disk full", bus.ErrUnprocessable), nil); !strings.Contains(string(raw), "\n    "+text+"\n") {
		t.Errorf("§9.1 does not quote the answer to a message given up, %q", text)
	}
	// §3's reasons are the runtime's.
	for _, m := range []map[string]any{nul, esc} {
		_, perr := bus.ParseInbound(subj, testSubject, mustJSON(t, m), 65536)
		if perr == nil || !strings.Contains(string(raw), "\n"+perr.Error()+"\n") {
			t.Errorf("§3 does not list the reason %v", perr)
		}
	}
	_, perr := bus.ParseInbound(subj, testSubject, []byte("{\"id\":\"\xff\"}"), 0)
	if perr == nil || !strings.Contains(string(raw), "\n"+perr.Error()+"\n") {
		t.Errorf("§3 does not list the reason %v", perr)
	}
}
