package markdown

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Split cuts Markdown source into pieces whose measure is at most limit,
// for platforms that cap message length. measure is what the platform
// counts, applied to a piece of Markdown source; nil counts runes. For
// Telegram pass func(s string) int { return UTF16Len(Plain(s)) } (the
// visible text in UTF-16 code units).
//
// Each piece is as long as fits, cut at the best boundary available:
// between paragraphs (and around code blocks), else between lines, else
// between words, else between characters (never inside a combined emoji or
// before a combining mark when avoidable). A cut inside a fenced code block
// closes the fence at the end of one piece and reopens it, with the same
// info string, at the start of the next, so each piece renders on its own.
// Whitespace at the cuts is dropped; no piece is empty or blank, and the
// pieces hold every other character of md in order. Blank input gives no
// pieces; input that fits gives one piece, md without surrounding blank
// lines.
//
// When limit is too small for even one character (plus the fence lines a
// piece inside a code block needs), that piece exceeds the limit, so that
// Split always makes progress. A limit below 1 is treated as 1.
func Split(md string, limit int, measure func(string) int) []string {
	if measure == nil {
		measure = utf8.RuneCountInString
	}
	limit = max(limit, 1)
	md = trimBlankLines(normalize(md))
	if md == "" {
		return nil
	}
	if measure(md) <= limit {
		return []string{md}
	}
	s := newSplitter(md, limit, measure)
	return s.split()
}

// trimBlankLines removes trailing white space and leading blank lines (but
// not the first line's indentation, which is significant). All white space
// gives "".
func trimBlankLines(md string) string {
	md = strings.TrimRightFunc(md, unicode.IsSpace)
	for {
		nl := strings.IndexByte(md, '\n')
		if nl < 0 {
			if strings.TrimSpace(md) == "" {
				return ""
			}
			return md
		}
		if strings.TrimSpace(md[:nl]) != "" {
			return md
		}
		md = md[nl+1:]
	}
}

// lineRole says what a source line is with respect to code fences.
type lineRole uint8

const (
	roleText  lineRole = iota
	roleOpen           // opens a fence
	roleCode           // inside a fence
	roleClose          // closes a fence
)

type srcLine struct {
	start, end int // byte offsets in md; end excludes the '\n'
	role       lineRole
	fence      int // index in splitter.fences, or -1 for roleText
	blank      bool
}

type fence struct {
	open, close int    // line indexes; close is len(lines) when unclosed
	openLine    string // the opening line as written
	indent      string // its indentation
	marker      string // the fence characters, e.g. "```"
}

// dedent reports whether a piece that reopens the fence must unindent it:
// four or more columns of indentation outside its list would make an
// indented code block.
func (f *fence) dedent() bool { return indentCols(f.indent) >= 4 }

type splitter struct {
	md      string
	lines   []srcLine
	fences  []fence
	limit   int
	measure func(string) int
}

func newSplitter(md string, limit int, measure func(string) int) *splitter {
	s := &splitter{md: md, limit: limit, measure: measure}
	cur := -1 // open fence index
	for start := 0; start <= len(md); {
		end := strings.IndexByte(md[start:], '\n')
		if end < 0 {
			end = len(md)
		} else {
			end += start
		}
		text := md[start:end]
		ln := srcLine{start: start, end: end, fence: -1, blank: strings.TrimSpace(text) == ""}
		switch {
		case cur >= 0 && isFenceClose(text, s.fences[cur].marker):
			ln.role, ln.fence = roleClose, cur
			s.fences[cur].close = len(s.lines)
			cur = -1
		case cur >= 0:
			ln.role, ln.fence = roleCode, cur
		default:
			if indent, marker, ok := fenceOpen(text); ok {
				cur = len(s.fences)
				s.fences = append(s.fences, fence{open: len(s.lines), close: -1, openLine: text, indent: indent, marker: marker})
				ln.role, ln.fence = roleOpen, cur
			}
		}
		s.lines = append(s.lines, ln)
		start = end + 1
	}
	if cur >= 0 {
		s.fences[cur].close = len(s.lines)
	}
	return s
}

// fenceOpen recognises a fence opening line: optional indentation (any
// amount, as fences nested in list items are indented), then three or
// more backticks or tildes, then an info string (without backticks for a
// backtick fence).
func fenceOpen(line string) (indent, marker string, ok bool) {
	trimmed := strings.TrimLeft(line, " \t")
	if len(trimmed) < 3 || (trimmed[0] != '`' && trimmed[0] != '~') {
		return "", "", false
	}
	n := 0
	for n < len(trimmed) && trimmed[n] == trimmed[0] {
		n++
	}
	if n < 3 || (trimmed[0] == '`' && strings.IndexByte(trimmed[n:], '`') >= 0) {
		return "", "", false
	}
	return line[:len(line)-len(trimmed)], trimmed[:n], true
}

// isFenceClose reports whether line closes a fence opened with marker: only
// the marker's character, at least as many, and white space.
func isFenceClose(line, marker string) bool {
	t := strings.TrimSpace(line)
	if len(t) < len(marker) {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] != marker[0] {
			return false
		}
	}
	return true
}

// indentCols counts indentation columns (a tab advances to the next
// multiple of 4).
func indentCols(indent string) int {
	cols := 0
	for _, c := range indent {
		if c == '\t' {
			cols += 4 - cols%4
		} else {
			cols++
		}
	}
	return cols
}

// lineAt returns the index of the line holding byte offset p.
func (s *splitter) lineAt(p int) int {
	return sort.Search(len(s.lines), func(i int) bool { return s.lines[i].end >= p }) // first line whose end is at or after p
}

// fenceAt returns the fence a cut at p falls inside (the pieces on both
// sides need fence lines), or -1.
func (s *splitter) fenceAt(p int) int {
	if p >= len(s.md) {
		return -1
	}
	ln := s.lines[s.lineAt(p)]
	if p == ln.start && ln.role == roleClose {
		return ln.fence
	}
	if ln.role == roleCode {
		return ln.fence
	}
	return -1
}

// Cut levels, best first.
const (
	levelParagraph = iota
	levelLine
	levelWord
	levelRune
	numLevels
)

func (s *splitter) split() []string {
	var pieces []string
	pos, reopen := 0, -1
	for pos < len(s.md) {
		cut := s.bestCut(pos, reopen)
		if strings.TrimSpace(s.md[pos:cut]) != "" {
			pieces = append(pieces, s.build(pos, cut, reopen))
		}
		reopen = s.fenceAt(cut)
		pos = s.skipBlank(cut, reopen)
	}
	return pieces
}

// skipBlank moves p past the blank lines (and, mid-line, the spaces) that
// start the next piece, unless the piece continues a code block.
func (s *splitter) skipBlank(p, reopen int) int {
	if reopen >= 0 {
		return p
	}
	for p < len(s.md) {
		ln := s.lines[s.lineAt(p)]
		if p > ln.start {
			for p < ln.end && (s.md[p] == ' ' || s.md[p] == '\t') {
				p++
			}
			if p < ln.end {
				return p
			}
			p = ln.end + 1
			continue
		}
		if !ln.blank {
			return p
		}
		p = ln.end + 1
	}
	return len(s.md)
}

// bestCut returns the end of the piece starting at pos: the furthest cut
// that fits at the best level that has one, or the nearest possible cut
// when nothing fits.
//
// Candidates are looked for in a window after pos, widened while its last
// candidate still fits, so that each piece costs time in proportion to its
// length rather than to the rest of the text. The window starts at 16
// bytes per unit of limit, which assumes a measure is not far below a
// quarter of the rune count of the source (true of runes, bytes, UTF-16
// units and of Plain, which drops only markup).
func (s *splitter) bestCut(pos, reopen int) int {
	fits := func(p int) bool {
		return strings.TrimSpace(s.md[pos:p]) != "" && s.measure(s.build(pos, p, reopen)) <= s.limit
	}
	nearest := len(s.md)
	for level := range numLevels {
		for window := 16*s.limit + 64; ; window *= 2 {
			end := len(s.md)
			if window < end-pos {
				end = pos + window
			}
			cands := s.candidates(level, pos, end)
			if len(cands) > 0 {
				nearest = min(nearest, cands[0])
			}
			p, ok := furthest(cands, fits)
			if !ok {
				break
			}
			if p == cands[len(cands)-1] && end < len(s.md) {
				continue // the whole window fits: look further
			}
			return p
		}
	}
	return nearest
}

// furthest returns the last candidate that fits, assuming that fitting is
// monotone (a longer piece does not fit if a shorter one does not). It
// gallops from the first candidate, so a short piece in a long text costs
// only a few measures of short pieces.
func furthest(cands []int, fits func(int) bool) (int, bool) {
	if len(cands) == 0 || !fits(cands[0]) {
		return 0, false
	}
	lo, step := 0, 1 // cands[lo] fits
	hi := len(cands) // first index known not to fit, or len
	for {
		next := lo + step
		if next >= len(cands) {
			break
		}
		if !fits(cands[next]) {
			hi = next
			break
		}
		lo, step = next, step*2
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(cands[mid]) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return cands[lo], true
}

// candidates returns the cut positions of a level after pos and up to
// end, ascending; end itself is included when it is len(md) (the whole
// rest).
func (s *splitter) candidates(level, pos, end int) []int {
	var out []int
	first := s.lineAt(pos)
	for li := first; li < len(s.lines) && s.lines[li].start <= end; li++ {
		ln := &s.lines[li]
		if li > first && ln.start < len(s.md) && s.lineCut(li, level) {
			out = append(out, ln.start)
		}
		if level < levelWord || (ln.role != roleText && ln.role != roleCode) {
			continue
		}
		for p := max(ln.start+1, pos+1); p < ln.end && p <= end; p++ {
			if level == levelWord && s.wordCut(p) || level == levelRune && s.runeCut(p) {
				out = append(out, p)
			}
		}
	}
	if end == len(s.md) {
		out = append(out, len(s.md))
	}
	return out
}

// lineCut reports whether the start of line li is a cut of the level (a
// line cut is also a word and a rune cut).
func (s *splitter) lineCut(li, level int) bool {
	ln, prev := &s.lines[li], &s.lines[li-1]
	switch ln.role {
	case roleClose:
		return false // the next piece would hold an empty code block
	case roleCode:
		// Inside a fence: the piece before must hold some code.
		return level >= levelLine && prev.role == roleCode
	}
	if level >= levelLine {
		return true
	}
	if ln.blank {
		return false
	}
	return ln.role == roleOpen || prev.role == roleClose || (prev.blank && prev.role == roleText)
}

// wordCut reports whether p starts a word after white space.
func (s *splitter) wordCut(p int) bool {
	c, prev := s.md[p], s.md[p-1]
	return (prev == ' ' || prev == '\t') && c != ' ' && c != '\t'
}

// runeCut reports whether p is a character boundary that does not split a
// combining sequence, an emoji sequence or a flag.
func (s *splitter) runeCut(p int) bool {
	if !utf8.RuneStart(s.md[p]) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s.md[p:])
	prev, _ := utf8.DecodeLastRuneInString(s.md[:p])
	switch {
	case prev == 0x200D, r == 0x200D:
		return false // zero-width joiner
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0x1F3FB && r <= 0x1F3FF, r >= 0xE0020 && r <= 0xE007F:
		return false // variation selector, skin tone, tag
	case unicode.In(r, unicode.Mn, unicode.Me):
		return false
	case isRegional(r) && isRegional(prev):
		return false
	}
	return true
}

func isRegional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

// build returns the piece md[pos:p] with the fence lines it needs: the
// reopened fence at the start when reopen >= 0, the closing line at the end
// when p falls inside a fence. A piece that starts with a deeply indented
// fence (one nested in a list item the piece does not include) has that
// fence unindented, so it is still a code block on its own.
func (s *splitter) build(pos, p, reopen int) string {
	lead := reopen
	if ln := &s.lines[s.lineAt(pos)]; lead < 0 && ln.start == pos && ln.role == roleOpen {
		lead = ln.fence
	}
	dedent := 0
	if lead >= 0 && s.fences[lead].dedent() {
		dedent = len(s.fences[lead].indent)
	}
	var b strings.Builder
	if reopen >= 0 {
		open := s.fences[reopen].openLine
		if dedent > 0 {
			open = strings.TrimLeft(open, " \t")
		}
		b.WriteString(open)
		b.WriteByte('\n')
	}
	body := s.md[pos:p]
	if dedent > 0 {
		body = s.dedentFence(pos, p, lead, dedent)
	}
	b.WriteString(strings.TrimRightFunc(body, unicode.IsSpace))
	if f := s.fenceAt(p); f >= 0 {
		fc := &s.fences[f]
		b.WriteByte('\n')
		if f == lead && dedent > 0 {
			b.WriteString(fc.marker)
		} else {
			b.WriteString(fc.indent + fc.marker)
		}
	}
	return b.String()
}

// dedentFence returns md[pos:p] with the lines of fence f (opening, code
// and closing lines) that start in the range unindented by up to n bytes
// of white space.
func (s *splitter) dedentFence(pos, p, f, n int) string {
	var b strings.Builder
	for li := s.lineAt(pos); li < len(s.lines) && s.lines[li].start < p; li++ {
		ln := &s.lines[li]
		from, to := max(ln.start, pos), min(ln.end+1, p, len(s.md))
		seg := s.md[from:to]
		if from == ln.start && ln.fence == f {
			k := 0
			for k < n && k < len(seg) && (seg[k] == ' ' || seg[k] == '\t') {
				k++
			}
			seg = seg[k:]
		}
		b.WriteString(seg)
	}
	return b.String()
}
