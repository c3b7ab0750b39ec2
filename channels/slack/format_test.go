package slack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-chat/switchboard/bus"
)

// renderCases are the golden rendering inputs: every construct the issue
// names, and the escaping.
var renderCases = []struct {
	name, kind, md string
}{
	{"emphasis", bus.KindReply, "**bold**, *italic*, _italic_, ~~strike~~ and `code`."},
	{"escaping", bus.KindReply, "a < b && c > d, <@U123> is not a mention, <!channel> not a ping"},
	{"links", bus.KindReply, "See [the docs](https://example.com/a?b=1&c=2), <https://auto.example>, [mail](mailto:x@example.com) and [bad](javascript:alert(1))."},
	{"code block", bus.KindReply, "Run:\n\n```sh\necho '<hi>' && exit 1\n```\n\nDone."},
	{"lists", bus.KindReply, "Steps:\n\n1. first\n2. second\n   - nested *one*\n   - nested two\n3. third\n\n- [ ] todo\n- [x] done"},
	{"headings and quotes", bus.KindReply, "# Title\n\nText.\n\n> quoted **line**\n> second"},
	{"table", bus.KindReply, "| name | n |\n|------|--:|\n| a | 1 |\n| bb | 22 |"},
	{"error", bus.KindError, "The model is **unavailable**."},
	{"split", bus.KindReply, strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 40) + "\n\n```\n" +
		strings.Repeat("code line that must stay in a block\n", 80) + "```\n\n" + strings.Repeat("Tail words. ", 100)},
}

func TestRenderGolden(t *testing.T) {
	var b strings.Builder
	for _, c := range renderCases {
		fmt.Fprintf(&b, "=== %s (%s)\n%s\n", c.name, c.kind, c.md)
		for i, p := range renderPieces(c.kind, c.md) {
			fmt.Fprintf(&b, "--- message %d\n%s\n", i+1, p)
		}
	}
	checkGolden(t, "render.golden", b.String())
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

func TestRenderPiecesBlankAndLimits(t *testing.T) {
	if got := renderPieces(bus.KindReply, " \n\n "); len(got) != 0 {
		t.Errorf("blank text rendered as %q", got)
	}
	if got := renderPieces(bus.KindError, ""); len(got) != 0 {
		t.Errorf("empty error rendered as %q", got)
	}
	long := strings.Repeat("x", 9000) // no boundary at all
	pieces := renderPieces(bus.KindReply, long)
	if len(pieces) != 3 || strings.Join(pieces, "") != long {
		t.Errorf("9000 characters without boundaries split into %d pieces", len(pieces))
	}
}

func TestSlackToText(t *testing.T) {
	names := map[string]string{"U1": "Ann"}
	resolve := func(id string) string { return names[id] }
	for _, tt := range []struct{ in, want string }{
		{"plain", "plain"},
		{"<@UBOT> hello", "hello"},
		{"hello <@UBOT>", "hello"},
		{"hey <@UBOT|switchboard>, hi", "hey , hi"},
		{"ask <@U1>", "ask @Ann"},
		{"ask <@U9|zed>", "ask @zed"},
		{"ask <@U9>", "ask @U9"},
		{"in <#C1|general> and <#C2>", "in #general and #C2"},
		{"<!here> <!channel> <!everyone>", "@here @channel @everyone"},
		{"<!subteam^S1|@devs> and <!date^1392734382^{date}|Feb 18>", "@devs and Feb 18"},
		{"<!unknown>", ""},
		{"<https://a.example>", "https://a.example"},
		{"<https://a.example|https://a.example>", "https://a.example"},
		{"<https://a.example/?x=1&amp;y=2|the &lt;site&gt;>", "the <site> (https://a.example/?x=1&y=2)"},
		{"<mailto:a@b.example|a@b.example>", "a@b.example"},
		{"1 &lt; 2 &amp;&amp; 3 &gt; 2", "1 < 2 && 3 > 2"},
		{"unclosed <https://a.example", "unclosed <https://a.example"},
		{"  spaced  ", "spaced"},
	} {
		if got := slackToText(tt.in, "UBOT", resolve); got != tt.want {
			t.Errorf("slackToText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseTSAndTruncate(t *testing.T) {
	if tm, ok := parseTS("1700000000.000100"); !ok || tm.UnixMicro() != 1700000000000100 {
		t.Errorf("parseTS = %v, %v", tm, ok)
	}
	if tm, ok := parseTS("12"); !ok || tm.Unix() != 12 {
		t.Errorf("parseTS(12) = %v, %v", tm, ok)
	}
	for _, bad := range []string{"", "x.1", "1.x", "-1.0"} {
		if _, ok := parseTS(bad); ok {
			t.Errorf("parseTS(%q) accepted", bad)
		}
	}
	if got := truncate("short", 10); got != "short" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("ab", 1); got != "a" {
		t.Errorf("truncate to 1 byte = %q, want a", got)
	}
	if got := truncate("éé", 3); got != "é" {
		t.Errorf("truncate inside a character = %q, want é", got)
	}
}

func TestSafeName(t *testing.T) {
	for _, tt := range []struct{ id, name, want string }{
		{"F1", "report.pdf", "F1-report.pdf"},
		{"F1", "../../etc/passwd", "F1-_.._etc_passwd"},
		{"F1", ".hidden", "F1-hidden"},
		{"F1", "", "F1-file"},
		{"", "a b.txt", "a_b.txt"},
		{"F/1", "日本.txt", "F1-__.txt"},
		{"F1", strings.Repeat("a", 200) + ".txt", "F1-" + strings.Repeat("a", 116) + ".txt"},
	} {
		if got := safeName(tt.id, tt.name); got != tt.want {
			t.Errorf("safeName(%q, %q) = %q, want %q", tt.id, tt.name, got, tt.want)
		}
	}
	if got := numbered("a.txt", 2); got != "a-2.txt" {
		t.Errorf("numbered = %q", got)
	}
}

func TestSaveFileNeverOverwrites(t *testing.T) {
	e := newEnv(t)
	a := e.offline("")
	e.slack.addFile("F1", map[string]any{"name": "a.txt", "mimetype": "text/plain", "size": 3}, []byte("new"))
	if err := e.root.MkdirAll("inbox/slack/D1", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.root.WriteFile("inbox/slack/D1/F1-a.txt", []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := fileRef{ID: "F1", Name: "a.txt", Mimetype: "text/plain", Size: 3}
	note := a.saveFile(t.Context(), "D1", f, "a.txt", e.slack.srv.URL+"/files/F1")
	if !strings.Contains(note, "inbox/slack/D1/F1-a-1.txt") {
		t.Errorf("note = %q, want the file saved as inbox/slack/D1/F1-a-1.txt", note)
	}
	if b, _ := e.root.ReadFile("inbox/slack/D1/F1-a.txt"); string(b) != "old" {
		t.Errorf("the existing file was overwritten: %q", b)
	}
	a.opts.Inbox = nil
	if note := a.saveFile(t.Context(), "D1", f, "a.txt", ""); !strings.Contains(note, "not saved: no workspace") {
		t.Errorf("without a workspace: %q", note)
	}
	big := fileRef{ID: "F2", Name: "big.bin", Size: maxFileBytes + 1}
	a.opts.Inbox = e.root
	if note := a.saveFile(t.Context(), "D1", big, "big.bin", ""); !strings.Contains(note, "larger than 25 MiB") {
		t.Errorf("too large: %q", note)
	}
}

func TestSerialKeepsOrderPerKey(t *testing.T) {
	s := newSerial(2, 100)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	got := map[string][]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		for _, k := range []string{"a", "b", "c"} {
			wg.Add(1)
			if !s.submit(ctx, k, func(context.Context) {
				defer wg.Done()
				mu.Lock()
				got[k] = append(got[k], i)
				mu.Unlock()
			}) {
				t.Fatal("submit refused")
			}
		}
	}
	wg.Wait()
	cancel()
	s.wait()
	for k, seq := range got {
		for i, v := range seq {
			if v != i {
				t.Fatalf("key %s ran %v, want 0..19 in order", k, seq)
			}
		}
	}
	if s.submit(ctx, "a", func(context.Context) {}) {
		t.Error("submit after cancel accepted")
	}
	full := newSerial(1, 1)
	block := make(chan struct{})
	ctx2, cancel2 := context.WithCancel(t.Context())
	full.submit(ctx2, "x", func(context.Context) { <-block })
	full.submit(ctx2, "x", func(context.Context) {})
	if full.submit(ctx2, "x", func(context.Context) {}) {
		t.Error("submit beyond the queue bound accepted")
	}
	close(block)
	cancel2()
	full.wait()
}

func TestLRU(t *testing.T) {
	l := newLRU[int](2)
	if !l.add("a", 1) || l.add("a", 9) {
		t.Fatal("add semantics")
	}
	l.put("b", 2)
	l.get("a") // a is now the most recent
	l.put("c", 3)
	if _, ok := l.get("b"); ok {
		t.Error("b not evicted")
	}
	if v, ok := l.get("a"); !ok || v != 1 {
		t.Error("a lost")
	}
	l.remove("a")
	if l.len() != 1 {
		t.Errorf("len = %d", l.len())
	}
}
