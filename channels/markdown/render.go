package markdown

import (
	"strconv"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
)

// target is an output format.
type target int

const (
	telegram target = iota
	slack
	plain
)

// thematicBreak is the line a thematic break (---) renders to.
const thematicBreak = "———"

// bullets are the list markers by nesting depth (the last repeats).
var bullets = [...]string{"•", "◦", "▪"}

// line is one output line. Lines of a code block are raw: nesting in a
// list does not indent them, so code stays copyable.
type line struct {
	s   string
	raw bool
}

// renderer walks one document. It is used once, by one goroutine.
type renderer struct {
	t   target
	src []byte

	// Open inline styles, so the same style is never nested in itself
	// (Telegram and Slack render <b><b>…</b></b> or *a *b* c* badly).
	bold, italic, strike, inLink int
	listDepth                    int
	quoteDepth                   int
}

func render(md string, t target) string {
	doc, src := parse(md)
	r := &renderer{t: t, src: src}
	lines := r.blocks(doc, false)
	var b strings.Builder
	blank := 0
	for _, l := range lines {
		s := l.s
		if !l.raw {
			s = strings.TrimRight(s, " \t")
		}
		if s == "" && !l.raw {
			blank++
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
			if blank > 0 {
				b.WriteByte('\n')
			}
		}
		blank = 0
		b.WriteString(s)
	}
	return strings.TrimRight(b.String(), " \t\n")
}

// blocks renders the block children of n. Siblings are separated by a
// blank line, or by nothing in a tight list item.
func (r *renderer) blocks(n ast.Node, tight bool) []line {
	var out []line
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		ls := r.block(c)
		if len(ls) == 0 {
			continue
		}
		if len(out) > 0 && !tight {
			out = append(out, line{})
		}
		out = append(out, ls...)
	}
	return out
}

// block renders one block node.
func (r *renderer) block(n ast.Node) []line {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		return textLines(r.inlines(n))
	case *ast.Heading:
		var s string
		if r.bold > 0 || r.t == plain {
			s = r.inlines(n)
		} else {
			r.bold++
			s = r.inlines(n)
			r.bold--
			if strings.TrimSpace(s) != "" {
				s = r.open(tagBold) + s + r.close(tagBold)
			}
		}
		return textLines(s)
	case *ast.ThematicBreak:
		return []line{{s: thematicBreak}}
	case *ast.FencedCodeBlock:
		return r.code(blockText(n, r.src), string(n.Language(r.src)))
	case *ast.CodeBlock:
		return r.code(blockText(n, r.src), "")
	case *ast.HTMLBlock:
		s := blockText(n, r.src)
		if n.HasClosure() {
			s += string(n.ClosureLine.Value(r.src))
		}
		return textLines(r.escape(strings.TrimRight(s, "\n")))
	case *ast.Blockquote:
		return r.quote(n)
	case *ast.List:
		return r.list(n)
	case *east.Table:
		return r.table(n)
	}
	// Unknown block (an extension we do not enable): its text.
	if n.Type() == ast.TypeBlock && n.FirstChild() != nil {
		if n.FirstChild().Type() == ast.TypeInline {
			return textLines(r.inlines(n))
		}
		return r.blocks(n, false)
	}
	return nil
}

// textLines splits rendered inline text into lines.
func textLines(s string) []line {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, "\n")
	ls := make([]line, len(parts))
	for i, p := range parts {
		ls[i] = line{s: p}
	}
	return ls
}

// blockText joins the source lines of a code or HTML block.
func blockText(n ast.Node, src []byte) string {
	var b strings.Builder
	lines := n.Lines()
	for i := range lines.Len() {
		seg := lines.At(i)
		b.Write(seg.Value(src))
	}
	return b.String()
}

// code renders a code block's text with an optional language.
func (r *renderer) code(body, lang string) []line {
	body = strings.TrimRight(body, "\n")
	if strings.TrimSpace(body) == "" {
		return nil
	}
	var s string
	switch r.t {
	case telegram:
		open := "<pre><code>"
		if lang = sanitizeLang(lang); lang != "" {
			open = `<pre><code class="language-` + lang + `">`
		}
		s = open + escapeHTML(body) + "</code></pre>"
	case slack:
		s = "```\n" + escapeSlack(strings.ReplaceAll(body, "```", "``\u200b`")) + "\n```"
	default:
		s = body
	}
	parts := strings.Split(s, "\n")
	ls := make([]line, len(parts))
	for i, p := range parts {
		ls[i] = line{s: p, raw: true}
	}
	return ls
}

// quote renders a blockquote: <blockquote> around the outermost one in
// Telegram (which does not nest them), "> " lines elsewhere.
func (r *renderer) quote(n *ast.Blockquote) []line {
	r.quoteDepth++
	ls := r.blocks(n, false)
	r.quoteDepth--
	if len(ls) == 0 {
		return nil
	}
	if r.t == telegram {
		if r.quoteDepth > 0 {
			return ls
		}
		ls[0].s = "<blockquote>" + ls[0].s
		ls[len(ls)-1].s += "</blockquote>"
		return ls
	}
	for i := range ls {
		ls[i].s = "> " + ls[i].s
	}
	return ls
}

// list renders a list as marker lines; an item's continuation lines and
// nested lists are indented by the marker's width.
func (r *renderer) list(n *ast.List) []line {
	var out []line
	num := n.Start
	marker := bullets[min(r.listDepth, len(bullets)-1)]
	r.listDepth++
	defer func() { r.listDepth-- }()
	for item := n.FirstChild(); item != nil; item = item.NextSibling() {
		m := marker
		if n.IsOrdered() {
			m = strconv.Itoa(num) + string(n.Marker)
			num++
		}
		body := r.blocks(item, n.IsTight)
		if len(out) > 0 && !n.IsTight {
			out = append(out, line{})
		}
		if len(body) == 0 {
			out = append(out, line{s: m})
			continue
		}
		indent := strings.Repeat(" ", len([]rune(m))+1)
		first := body[0]
		if first.raw {
			out = append(out, line{s: m})
		} else {
			out = append(out, line{s: m + " " + first.s})
			body = body[1:]
		}
		for _, l := range body {
			if !l.raw && l.s != "" {
				l.s = indent + l.s
			}
			out = append(out, l)
		}
	}
	return out
}

// table renders a GFM table as aligned preformatted text.
func (r *renderer) table(n *east.Table) []line {
	var rows [][]string
	header := -1
	for row := n.FirstChild(); row != nil; row = row.NextSibling() {
		if _, ok := row.(*east.TableHeader); ok {
			header = len(rows)
		}
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			cells = append(cells, strings.Join(strings.Fields(r.plainInlines(cell)), " "))
		}
		rows = append(rows, cells)
	}
	cols := 0
	for _, row := range rows {
		cols = max(cols, len(row))
	}
	if cols == 0 {
		return nil
	}
	widths := make([]int, cols)
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	align := func(i int) east.Alignment {
		if i < len(n.Alignments) {
			return n.Alignments[i]
		}
		return east.AlignNone
	}
	var b strings.Builder
	for ri, row := range rows {
		if ri > 0 {
			b.WriteByte('\n')
		}
		b.WriteByte('|')
		for i := range cols {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			b.WriteByte(' ')
			b.WriteString(pad(c, widths[i], align(i)))
			b.WriteString(" |")
		}
		if ri == header {
			b.WriteString("\n|")
			for i := range cols {
				b.WriteString(strings.Repeat("-", widths[i]+2))
				b.WriteByte('|')
			}
		}
	}
	return r.code(b.String(), "")
}

// pad pads s to width display columns with the given alignment.
func pad(s string, width int, a east.Alignment) string {
	gap := width - displayWidth(s)
	if gap <= 0 {
		return s
	}
	switch a {
	case east.AlignRight:
		return strings.Repeat(" ", gap) + s
	case east.AlignCenter:
		left := gap / 2
		return strings.Repeat(" ", left) + s + strings.Repeat(" ", gap-left)
	}
	return s + strings.Repeat(" ", gap)
}

// Inline styles.
type tag int

const (
	tagBold tag = iota
	tagItalic
	tagStrike
	tagCode
)

var (
	telegramOpen  = [...]string{"<b>", "<i>", "<s>", "<code>"}
	telegramClose = [...]string{"</b>", "</i>", "</s>", "</code>"}
	slackMarks    = [...]string{"*", "_", "~", "`"}
)

func (r *renderer) open(t tag) string {
	switch r.t {
	case telegram:
		return telegramOpen[t]
	case slack:
		return slackMarks[t]
	}
	return ""
}

func (r *renderer) close(t tag) string {
	switch r.t {
	case telegram:
		return telegramClose[t]
	case slack:
		return slackMarks[t]
	}
	return ""
}

// escape escapes text for the target.
func (r *renderer) escape(s string) string {
	switch r.t {
	case telegram:
		return escapeHTML(s)
	case slack:
		return escapeSlack(s)
	}
	return s
}

// inlines renders the inline children of n.
func (r *renderer) inlines(n ast.Node) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(&b, c)
	}
	return b.String()
}

// plainInlines renders the inline children of n as unescaped plain text.
func (r *renderer) plainInlines(n ast.Node) string {
	p := &renderer{t: plain, src: r.src}
	return p.inlines(n)
}

// styled renders n's children inside style t, unless t is already open.
func (r *renderer) styled(b *strings.Builder, n ast.Node, t tag, depth *int) {
	if *depth > 0 || r.t == plain {
		*depth++
		b.WriteString(r.inlines(n))
		*depth--
		return
	}
	*depth++
	inner := r.inlines(n)
	*depth--
	if inner == "" {
		return
	}
	b.WriteString(r.open(t))
	b.WriteString(inner)
	b.WriteString(r.close(t))
}

func (r *renderer) inline(b *strings.Builder, n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		v := n.Value(r.src)
		if n.IsRaw() {
			b.WriteString(r.escape(string(v)))
		} else {
			b.WriteString(r.escape(unescape(v)))
		}
		if n.SoftLineBreak() || n.HardLineBreak() {
			b.WriteByte('\n')
		}
	case *ast.String:
		if n.IsCode() || n.IsRaw() {
			b.WriteString(r.escape(string(n.Value)))
		} else {
			b.WriteString(r.escape(unescape(n.Value)))
		}
	case *ast.CodeSpan:
		r.codeSpan(b, n)
	case *ast.Emphasis:
		if n.Level >= 2 {
			r.styled(b, n, tagBold, &r.bold)
		} else {
			r.styled(b, n, tagItalic, &r.italic)
		}
	case *east.Strikethrough:
		r.styled(b, n, tagStrike, &r.strike)
	case *ast.Link:
		r.link(b, n, resolveURL(n.Destination), kindLink)
	case *ast.Image:
		r.link(b, n, resolveURL(n.Destination), kindImage)
	case *ast.AutoLink:
		u := string(n.URL(r.src))
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
			u = "mailto:" + u
		}
		r.link(b, n, escapeURL(u), kindAuto)
	case *ast.RawHTML:
		var raw strings.Builder
		for i := range n.Segments.Len() {
			seg := n.Segments.At(i)
			raw.Write(seg.Value(r.src))
		}
		b.WriteString(r.escape(raw.String()))
	case *east.TaskCheckBox:
		if n.IsChecked {
			b.WriteString("☑ ")
		} else {
			b.WriteString("☐ ")
		}
	default:
		// Unknown inline: its children.
		b.WriteString(r.inlines(n))
	}
}

// codeSpan renders inline code. Inside a link (Telegram cannot nest code
// there) and in Slack when the code holds a backtick, it is plain text.
func (r *renderer) codeSpan(b *strings.Builder, n *ast.CodeSpan) {
	var raw strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		var v []byte
		switch c := c.(type) {
		case *ast.Text:
			v = c.Value(r.src)
		case *ast.String:
			v = c.Value
		}
		raw.Write(v)
	}
	s := strings.ReplaceAll(raw.String(), "\n", " ")
	if s == "" {
		return
	}
	if r.t == plain || r.inLink > 0 || (r.t == slack && strings.Contains(s, "`")) {
		b.WriteString(r.escape(s))
		return
	}
	b.WriteString(r.open(tagCode))
	b.WriteString(r.escape(s))
	b.WriteString(r.close(tagCode))
}

// linkKind distinguishes the nodes rendered as links.
type linkKind int

const (
	kindLink linkKind = iota
	kindImage
	kindAuto
)

// link renders a link, image or autolink to url (already URL-escaped). The
// label is the link's formatted text (Telegram), its plain text (Slack,
// plain), an image's alt text, or an autolink's address; an empty label
// shows the URL. A URL with a scheme the target does not allow leaves the
// label alone.
func (r *renderer) link(b *strings.Builder, n ast.Node, url string, kind linkKind) {
	r.inLink++
	var label string
	switch {
	case kind == kindAuto:
		label = r.escape(autoLinkLabel(n, r.src))
	case kind == kindLink && r.t == telegram:
		label = r.inlines(n)
	default:
		label = r.escape(strings.ReplaceAll(r.plainInlines(n), "\n", " "))
	}
	r.inLink--
	if !allowedURL(url, r.t) {
		b.WriteString(label)
		return
	}
	if strings.TrimSpace(label) == "" {
		label = r.escape(url)
	}
	switch r.t {
	case telegram:
		b.WriteString(`<a href="`)
		b.WriteString(escapeAttr(url))
		b.WriteString(`">`)
		b.WriteString(label)
		b.WriteString("</a>")
	case slack:
		b.WriteString("<")
		b.WriteString(slackURL(url))
		if label != escapeSlack(url) {
			b.WriteString("|")
			b.WriteString(label)
		}
		b.WriteString(">")
	default:
		if label == url || "mailto:"+label == url {
			b.WriteString(label)
			return
		}
		b.WriteString(label)
		b.WriteString(" (")
		b.WriteString(url)
		b.WriteString(")")
	}
}

// autoLinkLabel returns the text of an autolink.
func autoLinkLabel(n ast.Node, src []byte) string {
	if a, ok := n.(*ast.AutoLink); ok {
		return string(a.Label(src))
	}
	return ""
}
