package markdown

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func telegramMeasure(s string) int { return UTF16Len(Plain(s)) }

func TestSplitFits(t *testing.T) {
	if got := Split("", 10, nil); got != nil {
		t.Errorf("Split(\"\") = %q, want nil", got)
	}
	if got := Split(" \n\n \t\n", 10, nil); got != nil {
		t.Errorf("Split(blank) = %q, want nil", got)
	}
	if got := Split("\n\n  indented\nline\n\n", 100, nil); !slices.Equal(got, []string{"  indented\nline"}) {
		t.Errorf("Split(short) = %q", got)
	}
}

func TestSplitPrefersBoundaries(t *testing.T) {
	tests := []struct {
		name  string
		md    string
		limit int
		want  []string
	}{
		{"paragraphs", "aaaa aaaa\n\nbbbb bbbb\n\ncccc cccc", 20, []string{"aaaa aaaa\n\nbbbb bbbb", "cccc cccc"}},
		{"paragraph before line", "aaaa\n\nbbbb\ncccc\ndddd", 16, []string{"aaaa", "bbbb\ncccc\ndddd"}},
		{"lines", "aaaa bbbb\ncccc dddd\neeee ffff", 20, []string{"aaaa bbbb\ncccc dddd", "eeee ffff"}},
		{"words", "aaaa bbbb cccc dddd eeee", 10, []string{"aaaa bbbb", "cccc dddd", "eeee"}},
		{"runes", "abcdefghijklmnopqrstuvwxyz", 10, []string{"abcdefghij", "klmnopqrst", "uvwxyz"}},
		{"before code block", "intro text\n```go\nx := 1\n```\nafter", 25, []string{"intro text", "```go\nx := 1\n```\nafter"}},
	}
	for _, tt := range tests {
		if got := Split(tt.md, tt.limit, nil); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Split(%q, %d) = %q, want %q", tt.name, tt.md, tt.limit, got, tt.want)
		}
	}
}

func TestSplitReopensFence(t *testing.T) {
	var code strings.Builder
	for i := range 30 {
		fmt.Fprintf(&code, "print(%d)  # line %d\n", i, i)
	}
	md := "Here is the script:\n\n```python title=\"x.py\"\n" + code.String() + "```\n\nDone."
	pieces := Split(md, 200, nil)
	if len(pieces) < 3 {
		t.Fatalf("Split gave %d pieces, want several: %q", len(pieces), pieces)
	}
	if pieces[0] != "Here is the script:" {
		t.Errorf("first piece = %q, want the introduction alone (paragraph boundary)", pieces[0])
	}
	for i, p := range pieces[1:] {
		lines := strings.Split(p, "\n")
		if i < len(pieces)-2 || strings.HasPrefix(p, "```") {
			if lines[0] != "```python title=\"x.py\"" {
				t.Errorf("piece %d starts with %q, want the reopened fence with its info string", i+1, lines[0])
			}
		}
		if i < len(pieces)-2 && lines[len(lines)-1] != "```" {
			t.Errorf("piece %d ends with %q, want a closing fence", i+1, lines[len(lines)-1])
		}
		if html := TelegramHTML(p); !strings.Contains(html, `<pre><code class="language-python">`) {
			t.Errorf("piece %d does not render as a python code block: %q", i+1, html)
		}
	}
	if last := pieces[len(pieces)-1]; !strings.HasSuffix(last, "```\n\nDone.") {
		t.Errorf("last piece = %q, want the end of the code block and the last paragraph", last)
	}
}

func TestSplitDedentsNestedFence(t *testing.T) {
	var code strings.Builder
	for i := range 20 {
		fmt.Fprintf(&code, "      echo %d\n", i)
	}
	md := "- step\n  - nested step:\n      ```sh\n" + code.String() + "      ```\n  - next"
	for _, p := range Split(md, 80, nil)[1:] {
		if !strings.HasPrefix(p, "```sh\n") {
			t.Fatalf("continuation piece %q does not start with an unindented fence", p)
		}
		if html := TelegramHTML(p); !strings.HasPrefix(html, `<pre><code class="language-sh">echo`) {
			t.Errorf("continuation piece %q renders as %q, want a sh code block", p, html)
		}
	}
}

func TestSplitKeepsGraphemes(t *testing.T) {
	family := "👨\u200d👩\u200d👧\u200d👦"
	md := strings.Repeat(family, 10) + strings.Repeat("e\u0301", 10) + strings.Repeat("🇯🇵", 10)
	pieces := Split(md, 9, nil)
	if strings.Join(pieces, "") != md {
		t.Fatalf("pieces %q do not rebuild the input", pieces)
	}
	for _, p := range pieces {
		first, _ := utf8.DecodeRuneInString(p)
		last, _ := utf8.DecodeLastRuneInString(p)
		if first == 0x200D || last == 0x200D || unicode.Is(unicode.Mn, first) {
			t.Errorf("piece %q splits a grapheme", p)
		}
		if n := strings.Count(p, "🇯") + strings.Count(p, "🇵"); n%2 != 0 && strings.ContainsAny(p, "🇯🇵") {
			t.Errorf("piece %q splits a flag", p)
		}
	}
}

func TestSplitTelegramLimit(t *testing.T) {
	md, err := os.ReadFile("testdata/answer.md")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat(string(md)+"\n\n", 12)
	pieces := Split(long, 4096, telegramMeasure)
	if len(pieces) < 2 {
		t.Fatalf("Split gave %d pieces", len(pieces))
	}
	for i, p := range pieces {
		if n := telegramMeasure(p); n > 4096 {
			t.Errorf("piece %d measures %d UTF-16 units, over 4096", i, n)
		}
		if err := checkTelegramHTML(TelegramHTML(p)); err != nil {
			t.Errorf("piece %d: %v", i, err)
		}
	}
	checkPreserved(t, long, pieces)
}

func TestSplitTinyLimitProgresses(t *testing.T) {
	md := "```go\nfmt.Println(1)\n```\n\n😀😀😀"
	pieces := Split(md, 1, nil)
	if len(pieces) == 0 {
		t.Fatal("no pieces")
	}
	checkPreserved(t, md, pieces)
	if got := Split("abc", 0, nil); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Split(limit 0) = %q, want runes", got)
	}
}

// fragments are the building blocks of the random documents.
var fragments = []func(r *rand.Rand) string{
	func(r *rand.Rand) string { return words(r, 3+r.IntN(40)) },
	func(r *rand.Rand) string { return "## " + words(r, 1+r.IntN(6)) },
	func(r *rand.Rand) string {
		var b strings.Builder
		for i := range 1 + r.IntN(6) {
			if i > 0 {
				b.WriteByte('\n')
			}
			if r.IntN(3) == 0 {
				b.WriteString("  ")
			}
			b.WriteString("- " + words(r, 1+r.IntN(12)))
		}
		return b.String()
	},
	func(r *rand.Rand) string {
		fence := []string{"```", "~~~", "````"}[r.IntN(3)]
		info := []string{"", "go", "python", "sh title=x"}[r.IntN(4)]
		var b strings.Builder
		b.WriteString(fence + info + "\n")
		for range 1 + r.IntN(15) {
			b.WriteString(strings.Repeat("\t", r.IntN(2)) + words(r, 1+r.IntN(10)) + "\n")
		}
		b.WriteString(fence)
		return b.String()
	},
	func(r *rand.Rand) string { return "> " + words(r, 2+r.IntN(20)) },
	func(r *rand.Rand) string { return strings.Repeat(string(rune('a'+r.IntN(26))), 30+r.IntN(200)) },
	func(r *rand.Rand) string {
		return "| a | b |\n|---|---|\n| " + words(r, 2) + " | " + words(r, 3) + " |"
	},
	func(r *rand.Rand) string {
		return "**" + words(r, 2) + "** *" + words(r, 2) + "* `a < b & c` [link](https://e.com/" + words(r, 1) + ")"
	},
}

var vocabulary = []string{"the", "agent", "replies", "quickly", "NATS", "JetStream", "消息", "队列", "😀", "👍🏽", "x<y", "a&b",
	"supercalifragilisticexpialidocious", "🇯🇵", "naïve", "e\u0301", "**", "_", "`", "\\", "[", "]"}

func words(r *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = vocabulary[r.IntN(len(vocabulary))]
	}
	return strings.Join(w, " ")
}

func randomDoc(r *rand.Rand) string {
	var parts []string
	for range 1 + r.IntN(12) {
		parts = append(parts, fragments[r.IntN(len(fragments))](r))
	}
	sep := []string{"\n\n", "\n", "\n\n\n"}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(sep[r.IntN(len(sep))])
		}
		b.WriteString(p)
	}
	if r.IntN(10) == 0 {
		b.WriteString("\n```go\nunclosed " + words(r, 5)) // unclosed fence at the end
	}
	return b.String()
}

func TestSplitProperties(t *testing.T) {
	measures := []struct {
		name string
		fn   func(string) int
		min  int // smallest limit that fits any fence lines plus a character
	}{
		{"runes", nil, 30},
		{"bytes", func(s string) int { return len(s) }, 40},
		{"telegram", telegramMeasure, 4},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		md := randomDoc(r)
		for _, m := range measures {
			limit := m.min + r.IntN(400)
			pieces := Split(md, limit, m.fn)
			measure := m.fn
			if measure == nil {
				measure = utf8.RuneCountInString
			}
			for j, p := range pieces {
				if strings.TrimSpace(p) == "" {
					t.Fatalf("doc %d, %s, limit %d: piece %d is blank", i, m.name, limit, j)
				}
				if n := measure(p); n > limit {
					t.Fatalf("doc %d, %s, limit %d: piece %d measures %d: %q\ndoc: %q", i, m.name, limit, j, n, p, md)
				}
				if err := checkTelegramHTML(TelegramHTML(p)); err != nil {
					t.Fatalf("doc %d, %s: piece %d %q: %v", i, m.name, j, p, err)
				}
				if open := openFenceAtEnd(p); open && !(j == len(pieces)-1 && openFenceAtEnd(md)) {
					t.Fatalf("doc %d, %s, limit %d: piece %d leaves a code fence open: %q", i, m.name, limit, j, p)
				}
			}
			checkPreserved(t, md, pieces)
		}
	}
}

// openFenceAtEnd reports whether md ends inside a code fence, by a simple
// scan of unindented and list-indented fence lines.
func openFenceAtEnd(md string) bool {
	marker := ""
	for line := range strings.SplitSeq(md, "\n") {
		t := strings.TrimLeft(line, " \t")
		switch {
		case marker == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			n := 0
			for n < len(t) && t[n] == t[0] {
				n++
			}
			if t[0] == '`' && strings.Contains(t[n:], "`") {
				continue
			}
			marker = t[:n]
		case marker != "" && strings.HasPrefix(strings.TrimSpace(t), marker) && strings.Trim(strings.TrimSpace(t), marker[:1]) == "":
			marker = ""
		}
	}
	return marker != ""
}

// checkPreserved checks that the pieces hold every non-white-space
// character of md in order, once the fence lines are removed from both
// (Split adds fence lines where it cuts a code block).
func checkPreserved(t *testing.T, md string, pieces []string) {
	t.Helper()
	want := content(md)
	var got strings.Builder
	for _, p := range pieces {
		got.WriteString(content(p))
	}
	if got.String() != want {
		t.Fatalf("pieces do not preserve the text:\n got %q\nwant %q\npieces %q", got.String(), want, pieces)
	}
}

// content returns the non-white-space characters of md outside fence lines.
func content(md string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(md, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			continue
		}
		for _, r := range t {
			if !unicode.IsSpace(r) {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// TestPlainBoundsTelegramText checks the measure recommended for Telegram:
// the visible text of TelegramHTML (tags removed, entities decoded) is
// never longer than Plain, so pieces measured on Plain fit once rendered.
func TestPlainBoundsTelegramText(t *testing.T) {
	docs := []string{}
	inputs, _ := filepath.Glob("testdata/*.md")
	for _, in := range inputs {
		md, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(md))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		docs = append(docs, randomDoc(r))
	}
	tags := regexp.MustCompile(`<[^>]*>`)
	entities := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&quot;", `"`, "&amp;", "&")
	for _, md := range docs {
		visible := entities.Replace(tags.ReplaceAllString(TelegramHTML(md), ""))
		if v, p := UTF16Len(visible), UTF16Len(Plain(md)); v > p {
			t.Errorf("Telegram visible text (%d units) longer than Plain (%d) for %q\nvisible: %q\nplain:   %q", v, p, md, visible, Plain(md))
		}
	}
}
