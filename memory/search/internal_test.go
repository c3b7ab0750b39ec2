package search

import (
	"slices"
	"strings"
	"testing"
)

func TestQueryTerms(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"Hello, World! hello", []string{"hello", "world"}},
		{"The flights to Tokyo", []string{"flight", "tokyo"}},
		{"planned planning plans", []string{"plan"}},
		{"parties classes bus meeting", []string{"party", "class", "bus", "meet"}},
		{"北京出差", []string{"北京", "京出", "出差"}},
		{"茶", []string{"茶"}},
		{"喝茶 tea", []string{"喝茶", "tea"}},
		{"NATS服务器", []string{"nat", "服务", "务器"}},
		{"東京タワー", []string{"東京", "京タ", "タワ", "ワー"}},
		{"서울 여행", []string{"서울", "여행"}},
		{"café naïve", []string{"café", "naïve"}},
		{"2025-03-04 v1.2", []string{"2025", "03", "04", "v1", "2"}},
		{"the of and", nil},
		{strings.Repeat("x", 65) + " ok", []string{"ok"}},
	} {
		if got := queryTerms(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("queryTerms(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestIndexTermsCJK(t *testing.T) {
	var got []string
	indexTerms("喝绿茶", func(s string) { got = append(got, s) })
	if want := []string{"喝", "喝绿", "绿", "绿茶", "茶"}; !slices.Equal(got, want) {
		t.Errorf("indexTerms = %q, want %q", got, want)
	}
}

func TestSplitChunks(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		b.WriteString("line about topic number ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	b.WriteString("## Heading\n")
	b.WriteString(strings.Repeat("é", 1500) + "\n") // one 3000-byte line
	b.WriteString("tail\n")
	text := b.String()
	cs := splitChunks(text)
	if len(cs) < 4 {
		t.Fatalf("%d chunks, want several", len(cs))
	}
	lines := strings.Split(text, "\n")
	next := 1
	for i, c := range cs {
		if c.Start > c.End || c.Start < next-1 || len(c.Text) > chunkBytes+1 {
			t.Errorf("chunk %d: lines %d-%d, %d bytes (previous ended before %d)", i, c.Start, c.End, len(c.Text), next)
		}
		if c.Start == c.End && !strings.Contains(lines[c.Start-1], c.Text) {
			t.Errorf("chunk %d text is not from line %d", i, c.Start)
		}
		if strings.ContainsRune(c.Text, '\uFFFD') {
			t.Errorf("chunk %d splits a rune", i)
		}
		next = c.End + 1
	}
	if last := cs[len(cs)-1]; last.Text != "tail" && !strings.HasSuffix(last.Text, "tail") {
		t.Errorf("last chunk = %q", last.Text)
	}
	if got := splitChunks(" \n\n \n"); len(got) != 0 {
		t.Errorf("blank text gave %d chunks", len(got))
	}
}
