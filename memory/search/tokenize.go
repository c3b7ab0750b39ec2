package search

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxTermBytes bounds a term; longer runs (hashes, base64) are skipped.
const maxTermBytes = 64

// stopWords are common English words that carry no meaning for search;
// they are neither indexed nor searched for.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "but": true, "by": true,
	"did": true, "do": true, "does": true, "for": true, "from": true, "had": true, "has": true, "have": true,
	"he": true, "her": true, "his": true, "i": true, "if": true, "in": true, "is": true, "it": true, "its": true,
	"me": true, "my": true, "of": true, "on": true, "or": true, "our": true, "she": true, "so": true, "that": true,
	"the": true, "their": true, "them": true, "then": true, "there": true, "they": true, "this": true, "to": true,
	"was": true, "we": true, "were": true, "what": true, "when": true, "where": true, "which": true, "who": true,
	"will": true, "with": true, "you": true, "your": true,
}

// isCJK reports whether r is written without spaces between words: Han,
// Hiragana, Katakana or Hangul, or the Japanese marks of the Common
// script that sit inside words (ー, 々, 〆).
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) || r == 'ー' || r == '々' || r == '〆'
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// indexTerms calls emit for every term of text as it is indexed: words of
// space-separated scripts lower-cased and lightly stemmed (stop words left
// out); runs of CJK characters as every single character and every
// overlapping pair of characters.
func indexTerms(text string, emit func(string)) {
	scan(text, func(word string) {
		if t, ok := normalizeWord(word); ok {
			emit(t)
		}
	}, func(run []rune) {
		for i, r := range run {
			emit(string(r))
			if i+1 < len(run) {
				emit(string(run[i : i+2]))
			}
		}
	})
}

// queryTerms returns the distinct terms of a query in order: words as in
// indexTerms; a run of CJK characters as its overlapping pairs, or as the
// character itself when the run is one character long.
func queryTerms(text string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	scan(text, func(word string) {
		if t, ok := normalizeWord(word); ok {
			add(t)
		}
	}, func(run []rune) {
		if len(run) == 1 {
			add(string(run))
			return
		}
		for i := 0; i+1 < len(run); i++ {
			add(string(run[i : i+2]))
		}
	})
	return out
}

// scan splits text into words (runs of letters and digits outside CJK) and
// CJK runs.
func scan(text string, word func(string), cjk func([]rune)) {
	var run []rune
	start := -1 // byte offset of the current word, -1 when none
	flushWord := func(end int) {
		if start >= 0 {
			word(text[start:end])
			start = -1
		}
	}
	flushCJK := func() {
		if len(run) > 0 {
			cjk(run)
			run = run[:0]
		}
	}
	for i, r := range text {
		switch {
		case isCJK(r):
			flushWord(i)
			run = append(run, r)
		case isWordRune(r):
			flushCJK()
			if start < 0 {
				start = i
			}
		default:
			flushWord(i)
			flushCJK()
		}
	}
	flushWord(len(text))
	flushCJK()
}

// normalizeWord lower-cases and stems a word; ok is false for stop words
// and overlong words.
func normalizeWord(w string) (string, bool) {
	if len(w) > maxTermBytes {
		return "", false
	}
	w = strings.ToLower(w)
	if stopWords[w] {
		return "", false
	}
	return stem(w), true
}

// stem strips common English inflections from an ASCII word: plurals
// (-s, -es, -ies) and -ing / -ed with a doubled final consonant undone
// ("planned" and "plans" both become "plan"). Other words are returned
// unchanged.
func stem(w string) string {
	if len(w) <= 3 || !isASCII(w) {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"):
	case strings.HasSuffix(w, "s"):
		w = w[:len(w)-1]
	}
	switch {
	case strings.HasSuffix(w, "ing") && len(w) > 5 && hasVowel(w[:len(w)-3]):
		w = undouble(w[:len(w)-3])
	case strings.HasSuffix(w, "ed") && len(w) > 4 && !strings.HasSuffix(w, "eed") && hasVowel(w[:len(w)-2]):
		w = undouble(w[:len(w)-2])
	}
	return w
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func hasVowel(s string) bool { return strings.ContainsAny(s, "aeiouy") }

// undouble turns a doubled final consonant into one ("plann" -> "plan"),
// except l, s and z ("call", "pass", "buzz").
func undouble(w string) string {
	n := len(w)
	if n >= 2 && w[n-1] == w[n-2] && !strings.ContainsRune("aeioulsz", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}
