package search

import (
	"strings"
)

// Chunking limits: a chunk holds at most this many bytes or lines of a
// file; a heading starts a new chunk once the current one is not tiny.
const (
	chunkBytes    = 1200
	chunkLines    = 40
	chunkMinBytes = 200
)

// chunk is one indexed piece of a file.
type chunk struct {
	Start int      `json:"start"` // first line, 1-based
	End   int      `json:"end"`   // last line, inclusive
	Text  string   `json:"text"`
	Len   int      `json:"len"`   // number of index terms (BM25 document length)
	Terms []string `json:"terms"` // distinct terms (to delete its postings)
	tf    map[string]int
}

// splitChunks cuts a file's text into chunks of whole lines and computes
// their terms. Blank chunks are left out.
func splitChunks(text string) []chunk {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var (
		out   []chunk
		b     strings.Builder
		start = 1
		count = 0
	)
	flush := func(end int) {
		if strings.TrimSpace(b.String()) != "" {
			out = append(out, newChunk(start, end, strings.TrimRight(b.String(), "\n")))
		}
		b.Reset()
		start, count = end+1, 0
	}
	for i, line := range lines {
		n := i + 1
		heading := strings.HasPrefix(line, "#")
		if count > 0 && (b.Len()+len(line) > chunkBytes || count >= chunkLines || (heading && b.Len() >= chunkMinBytes)) {
			flush(n - 1)
		}
		if count == 0 {
			start = n
		}
		// One overlong line is cut into pieces of its own.
		for len(line) > chunkBytes {
			cut := cutAt(line, chunkBytes)
			b.WriteString(line[:cut])
			line = line[cut:]
			flush(n)
			start, count = n, 0
		}
		b.WriteString(line)
		b.WriteByte('\n')
		count++
	}
	if count > 0 {
		flush(len(lines))
	}
	return out
}

// cutAt returns a cut position <= n in s that does not split a rune.
func cutAt(s string, n int) int {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return n
}

func newChunk(start, end int, text string) chunk {
	c := chunk{Start: start, End: end, Text: text, tf: map[string]int{}}
	indexTerms(text, func(t string) {
		c.tf[t]++
		c.Len++
	})
	c.Terms = make([]string, 0, len(c.tf))
	for t := range c.tf {
		c.Terms = append(c.Terms, t)
	}
	return c
}
