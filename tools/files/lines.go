package files

import (
	"bufio"
	"context"
	"errors"
	"io"
	"unicode/utf8"
)

// lineReader splits text into lines ("\n" or "\r\n" terminated; a last
// line without terminator counts) and caps each line's returned content.
type lineReader struct {
	br      *bufio.Reader
	maxLine int
	buf     []byte
	n       int // lines returned so far
}

func newLineReader(r io.Reader, maxLine int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), maxLine: maxLine}
}

// next returns the next line without its terminator (valid until the next
// call), its full length in bytes, and io.EOF after the last line. A line
// longer than maxLine is cut at a rune boundary (len(line) < full).
func (lr *lineReader) next(ctx context.Context) (line []byte, full int, err error) {
	if lr.n%1024 == 1023 {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
	}
	lr.buf = lr.buf[:0]
	any, ended := false, false
	var last byte
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if len(chunk) > 0 {
			any = true
		}
		if n := len(chunk); n > 0 && chunk[n-1] == '\n' {
			chunk, ended = chunk[:n-1], true
		}
		if len(chunk) > 0 {
			last = chunk[len(chunk)-1]
		}
		full += len(chunk)
		if room := lr.maxLine - len(lr.buf); room > 0 {
			lr.buf = append(lr.buf, chunk[:min(room, len(chunk))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		if !any {
			return nil, 0, io.EOF
		}
		break
	}
	lr.n++
	line = lr.buf
	if ended && last == '\r' { // CRLF
		full--
		line = line[:min(len(line), full)]
	}
	if len(line) < full {
		line = trimPartialRune(line)
	}
	return line, full, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	i := len(b) - 1
	for i > 0 && i > len(b)-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	if i >= 0 && !utf8.FullRune(b[i:]) {
		return b[:i]
	}
	return b
}

// countLines counts the lines of r as lineReader splits them.
func countLines(ctx context.Context, r io.Reader) (int, error) {
	lr := newLineReader(r, 0)
	for {
		if _, _, err := lr.next(ctx); err != nil {
			if errors.Is(err, io.EOF) {
				return lr.n, nil
			}
			return 0, err
		}
	}
}
