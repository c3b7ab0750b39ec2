package web

import (
	"io"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// skipped elements contribute no text.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true, atom.Svg: true,
	atom.Iframe: true, atom.Head: true, atom.Canvas: true, atom.Object: true, atom.Select: true,
	atom.Button: true, atom.Form: true, atom.Nav: true,
}

// blocks start and end on a line of their own.
var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true, atom.Header: true,
	atom.Footer: true, atom.Aside: true, atom.Ul: true, atom.Ol: true, atom.Li: true, atom.Table: true, atom.Tr: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true, atom.Pre: true,
	atom.Blockquote: true, atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Figure: true, atom.Figcaption: true,
	atom.Hr: true, atom.Address: true, atom.Details: true, atom.Summary: true, atom.Caption: true,
}

var manyNewlines = regexp.MustCompile(`\n{3,}`)

// htmlToText renders an HTML document as readable text: the title, then
// the text of <main> or <article> when the page has one (else <body>),
// with headings as "#", list items as "- ", links as "text (url)" resolved
// against base, and scripts, styles, navigation and forms left out.
func htmlToText(r io.Reader, base *url.URL) (title, text string, err error) {
	doc, err := html.Parse(r)
	if err != nil {
		return "", "", err
	}
	if t := find(doc, atom.Title); t != nil {
		title = strings.Join(strings.Fields(textOf(t)), " ")
	}
	root := find(doc, atom.Main)
	if root == nil {
		root = find(doc, atom.Article)
	}
	if root == nil {
		root = find(doc, atom.Body)
	}
	if root == nil {
		root = doc
	}
	w := &writer{base: base}
	w.node(root)
	out := strings.TrimSpace(manyNewlines.ReplaceAllString(w.lines(), "\n\n"))
	return title, out, nil
}

// find returns the first element a in document order.
func find(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, a); f != nil {
			return f
		}
	}
	return nil
}

// textOf concatenates the text below n.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// writer accumulates text; inline white space is collapsed.
type writer struct {
	base  *url.URL
	b     strings.Builder
	pre   int  // depth inside <pre>
	space bool // a space is pending before the next word
}

// lines returns the text with trailing blanks of each line removed.
func (w *writer) lines() string {
	ls := strings.Split(w.b.String(), "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(ls, "\n")
}

func (w *writer) newline(n int) {
	w.space = false
	s := w.b.String()
	if len(s) == 0 {
		return
	}
	for have := len(s) - len(strings.TrimRight(s, "\n")); have < n; have++ {
		w.b.WriteByte('\n')
	}
}

func (w *writer) text(s string) {
	if w.pre > 0 {
		w.b.WriteString(s)
		return
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		if s != "" {
			w.space = true
		}
		return
	}
	if (w.space || startsWithSpace(s)) && w.b.Len() > 0 && !strings.HasSuffix(w.b.String(), "\n") && !strings.HasSuffix(w.b.String(), " ") {
		w.b.WriteByte(' ')
	}
	w.b.WriteString(strings.Join(fields, " "))
	w.space = endsWithSpace(s)
}

func startsWithSpace(s string) bool { return s != "" && strings.TrimLeft(s, " \t\r\n\f") != s }
func endsWithSpace(s string) bool   { return s != "" && strings.TrimRight(s, " \t\r\n\f") != s }

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func (w *writer) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.node(c)
	}
}

func (w *writer) node(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.ElementNode:
	default:
		w.children(n)
		return
	}
	if skipped[n.DataAtom] || hasAttr(n, "hidden") || attr(n, "aria-hidden") == "true" {
		return
	}
	a := n.DataAtom
	switch a {
	case atom.Br:
		w.b.WriteByte('\n')
		w.space = false
		return
	case atom.Hr:
		w.newline(2)
		w.b.WriteString("---")
		w.newline(2)
		return
	case atom.Img:
		if alt := strings.TrimSpace(attr(n, "alt")); alt != "" {
			w.text(" [image: " + alt + "] ")
		}
		return
	case atom.A:
		w.link(n)
		return
	case atom.Td, atom.Th:
		w.children(n)
		w.b.WriteString(" | ")
		return
	}
	if blocks[a] {
		w.newline(blockGap(a))
	}
	switch a {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		w.b.WriteString(strings.Repeat("#", int(a.String()[1]-'0')) + " ")
	case atom.Li:
		w.b.WriteString("- ")
	case atom.Pre:
		w.pre++
		defer func() { w.pre-- }()
	}
	w.children(n)
	if blocks[a] {
		w.newline(blockGap(a))
	}
}

// blockGap is the number of line breaks around a block element.
func blockGap(a atom.Atom) int {
	switch a {
	case atom.Li, atom.Tr, atom.Dt, atom.Dd, atom.Div:
		return 1
	}
	return 2
}

// link writes a link's text followed by its resolved URL when that adds
// something.
func (w *writer) link(n *html.Node) {
	text := strings.Join(strings.Fields(textOf(n)), " ")
	href := strings.TrimSpace(attr(n, "href"))
	if href == "" || strings.HasPrefix(href, "#") || strings.HasPrefix(strings.ToLower(href), "javascript:") {
		w.children(n)
		return
	}
	u, err := url.Parse(href)
	if err == nil && w.base != nil {
		u = w.base.ResolveReference(u)
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "mailto") {
		w.children(n)
		return
	}
	target := u.String()
	switch {
	case text == "":
		return
	case text == target || text == strings.TrimPrefix(strings.TrimPrefix(target, "https://"), "http://"):
		w.text(target)
	default:
		w.children(n)
		w.text(" (" + target + ")")
	}
}
