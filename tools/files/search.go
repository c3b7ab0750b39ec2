package files

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Limits of search_files besides its configuration.
const (
	// DefaultSearchResults is how many matches a call gets when it does
	// not ask for a number.
	DefaultSearchResults = 50
	// maxShownLine bounds the text of one matching line in the output.
	maxShownLine = 300
	// maxPatternLen bounds the regular expression and the glob.
	maxPatternLen = 1000
)

// skippedDirs are never searched (they are big and rarely what is meant).
var skippedDirs = []string{".git", "node_modules"}

// NewSearch returns the search_files tool bound to ws: a regular-expression
// search of file contents and/or a glob match of file names, confined to
// the workspace through its os.Root.
func NewSearch(ws *workspace.Workspace, cfg tools.SearchFilesConfig, opts ...Option) tools.Tool {
	if cfg.MaxResults <= 0 {
		cfg.MaxResults = tools.DefaultConfig().SearchFiles.MaxResults
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = tools.DefaultConfig().SearchFiles.MaxFileBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = tools.DefaultConfig().SearchFiles.Timeout
	}
	return &searchFiles{guarded: newGuarded(ws, opts), cfg: cfg, desc: searchDescription(cfg)}
}

type searchFiles struct {
	guarded
	cfg  tools.SearchFilesConfig
	desc string
	// listed, when set (tests), is called after a folder was listed and
	// before its entries are opened.
	listed func(rel string)
}

func (*searchFiles) Name() string { return "search_files" }

// Description is built once, with the tool: it is asked for every turn.
func (t *searchFiles) Description() string { return t.desc }

func searchDescription(cfg tools.SearchFilesConfig) string {
	return "Search the workspace: with pattern, find lines whose text matches a regular expression (RE2 syntax) and return them as path:line: text; " +
		"with only glob, list the files whose path matches (e.g. *.md, notes/**/*.txt). Both together search only the matching files. " +
		fmt.Sprintf("At most %d results per call (default %d); files over %d bytes, binary files, .git and node_modules are skipped.",
			cfg.MaxResults, min(DefaultSearchResults, cfg.MaxResults), cfg.MaxFileBytes)
}

// searchFilesSchema is searchFiles's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var searchFilesSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"pattern":{"type":"string","description":"Regular expression (RE2) matched against each line of text files."},` +
	`"glob":{"type":"string","description":"File path pattern relative to path: * and ? within a name, ** for any number of folders, e.g. *.go or docs/**/*.md. Without a /, it matches the file name at any depth."},` +
	`"path":{"type":"string","description":"Folder to search, relative to the workspace. Default: the whole workspace."},` +
	`"ignore_case":{"type":"boolean","description":"Match the pattern case-insensitively."},` +
	`"max_results":{"type":"integer","minimum":1,"description":"Most results to return (default 50)."}` +
	`},"additionalProperties":false}`)

func (*searchFiles) Schema() json.RawMessage { return searchFilesSchema }

func (*searchFiles) Permission() string { return tools.PermRead }
func (*searchFiles) ParallelSafe() bool { return true }

type searchArgs struct {
	Pattern    string `json:"pattern"`
	Glob       string `json:"glob"`
	Path       string `json:"path"`
	IgnoreCase bool   `json:"ignore_case"`
	MaxResults int    `json:"max_results"`
}

// search is the state of one call.
type search struct {
	t       *searchFiles
	re      *regexp.Regexp
	glob    []string // split on "/", nil for none
	base    string   // root-relative folder searched
	limit   int
	out     []string
	size    int             // bytes in out
	full    bool            // limit or output size reached
	files   int             // files examined
	skipped int             // files skipped (too big, binary, unreadable)
	fs      workspace.Guard // the session's
}

func (t *searchFiles) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a searchArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	if a.Pattern == "" && a.Glob == "" {
		return tools.Result{}, fmt.Errorf("%w: give pattern (a regular expression to search file contents), glob (a file name pattern), or both", tools.ErrBadArgs)
	}
	if len(a.Pattern) > maxPatternLen || len(a.Glob) > maxPatternLen {
		return tools.Result{}, fmt.Errorf("%w: pattern and glob must be at most %d bytes", tools.ErrBadArgs, maxPatternLen)
	}
	switch {
	case a.MaxResults < 0:
		return tools.Result{}, fmt.Errorf("%w: max_results must be >= 1, got %d", tools.ErrBadArgs, a.MaxResults)
	case a.MaxResults == 0:
		a.MaxResults = min(DefaultSearchResults, t.cfg.MaxResults)
	case a.MaxResults > t.cfg.MaxResults:
		a.MaxResults = t.cfg.MaxResults
	}
	s := &search{t: t, limit: a.MaxResults}
	if a.Pattern != "" {
		expr := a.Pattern
		if a.IgnoreCase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return tools.Result{}, fmt.Errorf("%w: pattern is not a valid regular expression: %v", tools.ErrBadArgs, err)
		}
		s.re = re
	}
	if a.Glob != "" {
		g, err := splitGlob(a.Glob)
		if err != nil {
			return tools.Result{}, err
		}
		s.glob = g
	}
	base, err := t.resolve(call.Session, a.Path, false)
	if err != nil {
		return tools.Result{}, err
	}
	s.base = base
	s.fs = t.fs(call.Session)
	d, _, err := s.fs.Open(base)
	if err != nil {
		return tools.Result{}, describe("search", display(base), err)
	}
	fi, err := d.Stat()
	d.Close()
	if err != nil {
		return tools.Result{}, describe("search", display(base), err)
	}
	if !fi.IsDir() {
		return tools.Result{}, fmt.Errorf("%s is a file, not a folder; give its folder as path and its name as glob", display(base))
	}

	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	walkErr := s.walk(ctx, base)
	timedOut := errors.Is(walkErr, context.DeadlineExceeded) && ctx.Err() != nil
	if walkErr != nil && !timedOut {
		return tools.Result{}, walkErr
	}
	return tools.Result{Text: s.report(timedOut)}, nil
}

// splitGlob validates a glob and splits it into path segments. A glob
// without "/" matches the name at any depth ("**/" is implied).
func splitGlob(g string) ([]string, error) {
	g = strings.TrimPrefix(filepath.ToSlash(g), "./")
	if strings.HasPrefix(g, "/") || slices.Contains(strings.Split(g, "/"), "..") {
		return nil, fmt.Errorf("%w: glob %q must be relative to path and must not contain \"..\"", tools.ErrBadArgs, g)
	}
	segs := strings.Split(g, "/")
	for _, seg := range segs {
		if _, err := path.Match(seg, ""); err != nil {
			return nil, fmt.Errorf("%w: glob %q is malformed: %v", tools.ErrBadArgs, g, err)
		}
	}
	if len(segs) == 1 {
		segs = []string{"**", segs[0]}
	}
	return segs, nil
}

// globMatch matches the "/"-separated path segments p against the glob
// segments g, where "**" stands for zero or more segments.
func globMatch(g, p []string) bool {
	for len(g) > 0 {
		if g[0] == "**" {
			for i := 0; i <= len(p); i++ {
				if globMatch(g[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(g[0], p[0]); !ok {
			return false
		}
		g, p = g[1:], p[1:]
	}
	return len(p) == 0
}

// walk searches the folder rel (root-relative) and below, in name order.
// Every open goes through the session's guard, so a folder or file
// replaced by a symlink (leading outside, or into a folder the session
// may not see) between the listing and the open is refused by the open
// itself.
func (s *search) walk(ctx context.Context, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, _, err := s.fs.Open(rel)
	if err != nil {
		s.skipped++
		return nil
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		s.skipped++
		return nil
	}
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	if s.t.listed != nil {
		s.t.listed(rel)
	}
	for _, e := range entries {
		if s.full {
			return nil
		}
		child := filepath.Join(rel, e.Name())
		if !s.fs.Visible(child) {
			continue
		}
		switch typ := e.Type(); {
		case typ.IsDir():
			if slices.Contains(skippedDirs, e.Name()) {
				continue
			}
			if err := s.walk(ctx, child); err != nil {
				return err
			}
		case typ.IsRegular(), typ&fs.ModeSymlink != 0:
			// Symlinks are followed only to files inside the workspace
			// the session may see (the guard refuses the rest); linked
			// folders are not entered, so there are no cycles.
			if err := s.file(ctx, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// file examines one file.
func (s *search) file(ctx context.Context, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	inBase, err := filepath.Rel(s.base, rel)
	if err != nil {
		return nil
	}
	if s.glob != nil && !globMatch(s.glob, strings.Split(filepath.ToSlash(inBase), "/")) {
		return nil
	}
	f, _, err := s.fs.Open(rel)
	if err != nil {
		s.skipped++
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		if err != nil {
			s.skipped++
		}
		return nil
	}
	s.files++
	if s.re == nil {
		s.add(fmt.Sprintf("%s  (%d bytes)", display(rel), fi.Size()))
		return nil
	}
	if fi.Size() > s.t.cfg.MaxFileBytes {
		s.skipped++
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, s.t.cfg.MaxFileBytes+1))
	if err != nil || int64(len(data)) > s.t.cfg.MaxFileBytes {
		s.skipped++
		return nil
	}
	if looksBinary(data[:min(len(data), sniffLen)]) {
		s.skipped++
		return nil
	}
	for n, line := 1, []byte(nil); len(data) > 0 && !s.full; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if s.re.Match(line) {
			s.add(fmt.Sprintf("%s:%d: %s", display(rel), n, shortLine(line)))
		}
	}
	return nil
}

func (s *search) add(entry string) {
	if len(s.out) >= s.limit || s.size+len(entry)+1 > MaxReadBytes {
		s.full = true
		return
	}
	s.out = append(s.out, entry)
	s.size += len(entry) + 1
}

// shortLine cuts a matching line for display, on a rune boundary.
func shortLine(line []byte) string {
	text := strings.ToValidUTF8(string(bytes.TrimSpace(line)), "\uFFFD")
	if len(text) <= maxShownLine {
		return text
	}
	cut := maxShownLine
	for cut > 0 && !isRuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + " [...]"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func (s *search) report(timedOut bool) string {
	var b strings.Builder
	what := "matches"
	if s.re == nil {
		what = "files"
	}
	if len(s.out) == 0 {
		fmt.Fprintf(&b, "no %s found (%d files examined)", what, s.files)
	} else {
		b.WriteString(strings.Join(s.out, "\n"))
	}
	var notes []string
	if s.full {
		notes = append(notes, fmt.Sprintf("more %s exist; only the first %d are shown: narrow the pattern, glob or path, or ask for more with max_results (up to %d)", what, len(s.out), s.t.cfg.MaxResults))
	}
	if timedOut {
		notes = append(notes, fmt.Sprintf("the search stopped after %s; results are incomplete", s.t.cfg.Timeout))
	}
	if s.skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d files skipped (binary, larger than %d bytes, or unreadable)", s.skipped, s.t.cfg.MaxFileBytes))
	}
	for _, n := range notes {
		b.WriteString("\n... " + n)
	}
	return b.String()
}
