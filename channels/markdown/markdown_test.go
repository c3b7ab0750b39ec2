package markdown

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenTargets are the renderers compared with testdata/<name>.<suffix>.
var goldenTargets = []struct {
	suffix string
	render func(string) string
}{
	{"telegram.html", TelegramHTML},
	{"slack.txt", SlackMrkdwn},
	{"plain.txt", Plain},
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.md")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata/*.md: %v", err)
	}
	for _, in := range inputs {
		md, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(in, ".md")
		for _, tg := range goldenTargets {
			t.Run(filepath.Base(base)+"."+tg.suffix, func(t *testing.T) {
				got := tg.render(string(md)) + "\n"
				path := base + "." + tg.suffix
				if *update {
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if got != string(want) {
					t.Errorf("%s differs from golden %s (go test -update rewrites it):\n--- got ---\n%s\n--- want ---\n%s", in, path, got, want)
				}
				if tg.suffix == "telegram.html" {
					if err := checkTelegramHTML(got); err != nil {
						t.Errorf("not valid Telegram HTML: %v", err)
					}
				}
			})
		}
	}
}

// telegramTag matches a tag of the output, which must be one Telegram
// accepts, with only the attributes we emit.
var telegramTag = regexp.MustCompile(`^<(/?)(b|i|s|code|pre|a|blockquote)((?: href="[^"<>]*")|(?: class="language-[A-Za-z0-9_+#.-]+"))?>`)

// checkTelegramHTML checks that s is well-formed Telegram HTML: only
// allowed tags, properly nested and all closed, attributes only where we
// emit them, no raw < or >, every & an entity, <pre> holding only <code>,
// and no tags inside <code>.
func checkTelegramHTML(s string) error {
	var stack []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			m := telegramTag.FindStringSubmatch(s[i:])
			if m == nil {
				return fmt.Errorf("unexpected tag or raw '<' at %d: %.40q", i, s[i:])
			}
			closing, name, attr := m[1] == "/", m[2], m[3]
			if closing {
				if attr != "" {
					return fmt.Errorf("closing tag with attributes at %d", i)
				}
				if len(stack) == 0 || stack[len(stack)-1] != name {
					return fmt.Errorf("</%s> at %d does not close the open %v", name, i, stack)
				}
				stack = stack[:len(stack)-1]
			} else {
				if (name == "a") != strings.HasPrefix(attr, " href=") || (attr != "" && name != "a" && name != "code") {
					return fmt.Errorf("<%s> with attribute %q at %d", name, attr, i)
				}
				if len(stack) > 0 && stack[len(stack)-1] == "code" {
					return fmt.Errorf("<%s> inside <code> at %d", name, i)
				}
				if len(stack) > 0 && stack[len(stack)-1] == "pre" && name != "code" {
					return fmt.Errorf("<%s> inside <pre> at %d", name, i)
				}
				if name == "blockquote" && contains(stack, "blockquote") {
					return fmt.Errorf("nested <blockquote> at %d", i)
				}
				if name == "a" && contains(stack, "a") {
					return fmt.Errorf("nested <a> at %d", i)
				}
				stack = append(stack, name)
			}
			i += len(m[0])
		case '>':
			return fmt.Errorf("raw '>' at %d", i)
		case '&':
			ok := false
			for _, e := range []string{"&amp;", "&lt;", "&gt;", "&quot;"} {
				if strings.HasPrefix(s[i:], e) {
					ok = true
					i += len(e)
					break
				}
			}
			if !ok {
				return fmt.Errorf("raw '&' at %d: %.20q", i, s[i:])
			}
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed tags %v", stack)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("invalid UTF-8")
	}
	return nil
}

func contains(stack []string, name string) bool {
	for _, s := range stack {
		if s == name {
			return true
		}
	}
	return false
}

func TestCheckTelegramHTMLRejects(t *testing.T) {
	for _, bad := range []string{
		"<b>x", "<b><i>x</b></i>", "</b>", "<u>x</u>", "a < b", "a > b", "AT&T", `<a href="x">y`,
		`<b class="language-go">x</b>`, "<code><b>x</b></code>", "<pre><b>x</b></pre>",
		"<blockquote><blockquote>x</blockquote></blockquote>", `<a>x</a>`,
	} {
		if checkTelegramHTML(bad) == nil {
			t.Errorf("checkTelegramHTML(%q) accepted it", bad)
		}
	}
	if err := checkTelegramHTML(`<b>a &amp; <i>b</i></b> <pre><code class="language-go">x &lt; y</code></pre> <a href="https://x?a=1&amp;b=2">l</a>`); err != nil {
		t.Errorf("checkTelegramHTML rejected valid HTML: %v", err)
	}
}

func TestTelegramHTML(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"**b** *i* _i_ ~~s~~ `c<d`", "<b>b</b> <i>i</i> <i>i</i> <s>s</s> <code>c&lt;d</code>"},
		{"**bold **nested** bold**", "<b>bold nested bold</b>"},
		{"# Head *it*", "<b>Head <i>it</i></b>"},
		{"# **Bold head**", "<b>Bold head</b>"},
		{`[x](https://e.com/?a=1&b="2")`, `<a href="https://e.com/?a=1&amp;b=%222%22">x</a>`},
		{"[x](javascript:alert(1))", "x"},
		{"[x](JavaScript:alert(1))", "x"},
		{"[x](/relative)", "x"},
		{"[x](tg://user?id=1)", `<a href="tg://user?id=1">x</a>`},
		{"[x](mailto:a@b.c)", `<a href="mailto:a@b.c">x</a>`},
		{"[`code` link](https://e.com)", `<a href="https://e.com">code link</a>`},
		{"![alt *text*](https://e.com/i.png)", `<a href="https://e.com/i.png">alt text</a>`},
		{"```go\nx := 1 < 2\n```", `<pre><code class="language-go">x := 1 &lt; 2</code></pre>`},
		{"```\nplain\n```", "<pre><code>plain</code></pre>"},
		{"```\" onclick=\"x\nplain\n```", "<pre><code>plain</code></pre>"},
		{"```c++ {linenos}\nint x;\n```", `<pre><code class="language-c++">int x;</code></pre>`},
		{"```<b>\nx\n```", `<pre><code class="language-b">x</code></pre>`},
		{"```go\n```", ""},
		{"- a\n- b\n  1. c\n  2. d", "• a\n• b\n  1. c\n  2. d"},
		{"> a\n>\n> > b", "<blockquote>a\n\nb</blockquote>"},
		{"a\n\n---\n\nb", "a\n\n———\n\nb"},
		{"<b>raw</b> <script>x</script>", "&lt;b&gt;raw&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"},
		{"p1\n\n\n\np2", "p1\n\np2"},
		{"", ""},
		{"\x00\xff", "\uFFFD\uFFFD"},
		{"a\r\nb", "a\nb"},
	}
	for _, tt := range tests {
		got := TelegramHTML(tt.in)
		if got != tt.want {
			t.Errorf("TelegramHTML(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if err := checkTelegramHTML(got); err != nil {
			t.Errorf("TelegramHTML(%q) = %q: %v", tt.in, got, err)
		}
	}
}

func TestSlackMrkdwn(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"**b** *i* ~~s~~ `c&d`", "*b* _i_ ~s~ `c&amp;d`"},
		{"# Title", "*Title*"},
		{"[x <y>](https://e.com/?a=1&b=2)", "<https://e.com/?a=1&amp;b=2|x &lt;y&gt;>"},
		{"[**bold** label](https://e.com/a|b)", "<https://e.com/a%7Cb|bold label>"},
		{"<https://e.com>", "<https://e.com>"},
		{"[x](tg://resolve?domain=a)", "x"},
		{"[x](javascript:alert(1))", "x"},
		{"``a`b``", "a`b"},
		{"```js\nif (a < b) {}\n```", "```\nif (a &lt; b) {}\n```"},
		{"```\na ``` b\n```", "```\na ``\u200b` b\n```"},
		{"> quote\n> *it*", "> quote\n> _it_"},
		{"- a\n  - b", "• a\n  ◦ b"},
	}
	for _, tt := range tests {
		if got := SlackMrkdwn(tt.in); got != tt.want {
			t.Errorf("SlackMrkdwn(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPlain(t *testing.T) {
	tests := []struct{ in, want string }{
		{"**b** *i* ~~s~~ `a<b>`", "b i s a<b>"},
		{"[text](https://e.com)", "text (https://e.com)"},
		{"[https://e.com](https://e.com)", "https://e.com"},
		{"<https://e.com>", "https://e.com"},
		{"<a@b.c>", "a@b.c"},
		{"[x](javascript:alert(1))", "x"},
		{"![alt](https://e.com/i.png)", "alt (https://e.com/i.png)"},
		{"```go\n\tx := 1\n```", "\tx := 1"},
		{"1. a\n1. b\n1. c", "1. a\n2. b\n3. c"},
		{"&amp; &lt; &#65; \\*", "& < A *"},
	}
	for _, tt := range tests {
		if got := Plain(tt.in); got != tt.want {
			t.Errorf("Plain(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUTF16Len(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abc": 3, "é": 1, "中文": 2, "😀": 2, "👍🏽": 4, "a\xffb": 3} {
		if got := UTF16Len(s); got != want {
			t.Errorf("UTF16Len(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestConcurrentRendering(t *testing.T) {
	md, err := os.ReadFile("testdata/answer.md")
	if err != nil {
		t.Fatal(err)
	}
	want := TelegramHTML(string(md))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if got := TelegramHTML(string(md)); got != want {
					t.Error("concurrent TelegramHTML differs")
					return
				}
				_ = Split(string(md), 200, func(s string) int { return UTF16Len(Plain(s)) })
			}
		})
	}
	wg.Wait()
}

func FuzzRender(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/*.md")
	for _, in := range inputs {
		md, err := os.ReadFile(in)
		if err == nil {
			f.Add(string(md), 50)
		}
	}
	for _, s := range []string{"", "*", "**", "`", "```", "[", "](", "<", "&", "> >", "- - -", "|a|\n|-|", "\\", "~~~", "\xff\x00", "1.\n2)"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, md string, limit int) {
		html := TelegramHTML(md)
		if err := checkTelegramHTML(html); err != nil {
			t.Fatalf("TelegramHTML(%q) = %q: %v", md, html, err)
		}
		if s := SlackMrkdwn(md); !utf8.ValidString(s) {
			t.Fatalf("SlackMrkdwn(%q) is not valid UTF-8", md)
		}
		_ = Plain(md)
		limit = 20 + abs(limit)%200
		for _, p := range Split(md, limit, nil) {
			if strings.TrimSpace(p) == "" {
				t.Fatalf("Split(%q, %d) gave a blank piece", md, limit)
			}
			if err := checkTelegramHTML(TelegramHTML(p)); err != nil {
				t.Fatalf("piece %q of %q: %v", p, md, err)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // math.MinInt
			return 0
		}
		return -n
	}
	return n
}

func benchInput(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	inputs, _ := filepath.Glob("testdata/*.md")
	for _, in := range inputs {
		md, err := os.ReadFile(in)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(md)
		sb.WriteString("\n\n")
	}
	return sb.String()
}

func BenchmarkTelegramHTML(b *testing.B) {
	md := benchInput(b)
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = TelegramHTML(md)
	}
}

func BenchmarkSlackMrkdwn(b *testing.B) {
	md := benchInput(b)
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = SlackMrkdwn(md)
	}
}

func BenchmarkPlain(b *testing.B) {
	md := benchInput(b)
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Plain(md)
	}
}

// BenchmarkSplitTelegram splits a 64 KiB reply the way the Telegram adapter
// does: 4096 UTF-16 units of visible text.
func BenchmarkSplitTelegram(b *testing.B) {
	one := benchInput(b)
	md := strings.Repeat(one, 64<<10/len(one)+1)[:64<<10]
	measure := func(s string) int { return UTF16Len(Plain(s)) }
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Split(md, 4096, measure)
	}
}

// BenchmarkSplitRunes splits the same text counting runes of the source.
func BenchmarkSplitRunes(b *testing.B) {
	one := benchInput(b)
	md := strings.Repeat(one, 64<<10/len(one)+1)[:64<<10]
	b.SetBytes(int64(len(md)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Split(md, 3500, nil)
	}
}
