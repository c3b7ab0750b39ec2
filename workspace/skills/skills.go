// Package skills reads the workspace's skills: folders
// <workspace>/skills/<name>/ holding a SKILL.md whose YAML front matter
// names the skill, describes when to use it and may list requirements:
//
//	---
//	name: weather
//	description: Current weather and forecasts for a city.
//	requires:
//	  bins: [curl]
//	  env: [WEATHER_API_KEY]
//	---
//	# Weather
//	...instructions...
//
// Skills are disclosed progressively: the system prompt lists only each
// skill's name, description and path ([Catalog.PromptSection]); the model
// reads the SKILL.md it needs with read_file. A skill whose requirements
// are missing (a program not on PATH, an unset environment variable), or
// whose SKILL.md is malformed, is listed as unavailable with the reason.
// A model that calls a skill's name as if it were a tool gets the SKILL.md
// back with a hint ([Catalog.Fallback]).
//
// The folder is re-read only when it changed: every call stats skills/,
// each skill folder and each SKILL.md (through the workspace's os.Root)
// and parses again only when a size, modification time or inode differs.
package skills

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

// Dir is the skills folder inside the workspace, one of the shared prompt
// inputs (workspace.SharedInput): only an owner changes it.
const Dir = workspace.SkillsDir

// FileName is the file that makes a folder a skill.
const FileName = "SKILL.md"

// Limits.
const (
	// MaxSkillBytes bounds the SKILL.md read.
	MaxSkillBytes = 256 << 10
	// MaxDescription bounds the description shown in the prompt, in bytes.
	MaxDescription = 1024
	// MaxSkills bounds the skills listed.
	MaxSkills = 200
)

// validName is the rule for skill names.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Requires lists what a skill needs from the host.
type Requires struct {
	// Bins are programs that must be on PATH.
	Bins []string `yaml:"bins"`
	// Env are environment variables that must be set (non-empty).
	Env []string `yaml:"env"`
}

// Skill is one skill as found in the workspace.
type Skill struct {
	Name        string
	Description string
	// Path is the SKILL.md path relative to the workspace, slash-separated
	// ("skills/weather/SKILL.md"); read_file accepts it as is.
	Path     string
	Requires Requires
	// Missing lists unmet requirements in words ("program ffmpeg",
	// "environment variable GITHUB_TOKEN").
	Missing []string
	// Problem says why SKILL.md could not be used (unreadable, no front
	// matter, invalid name...); empty when it is fine.
	Problem string
}

// Available reports whether the skill can be used: no problem and no
// missing requirement.
func (s Skill) Available() bool { return s.Problem == "" && len(s.Missing) == 0 }

// Reason says why the skill is unavailable ("" when it is available).
func (s Skill) Reason() string {
	if s.Problem != "" {
		return s.Problem
	}
	if len(s.Missing) > 0 {
		return "missing " + strings.Join(s.Missing, ", ")
	}
	return ""
}

// Options tune a Catalog; the zero value uses the process's PATH and
// environment.
type Options struct {
	// LookPath finds a program (default exec.LookPath).
	LookPath func(string) (string, error)
	// LookupEnv reads an environment variable (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Recheck is how often requirements are checked again when no file
	// changed, so that a program installed later is noticed (default 1m).
	Recheck time.Duration
	// Allow, when set, limits where a SKILL.md may be read from: it is
	// applied to the path and to its real path after symbolic links
	// (workspace.Guard; hard-linked files are refused too). A skill is
	// shown to every user, so the daemon refuses every private folder
	// (memory of users and chats, chat inboxes): a link planted in
	// skills/ cannot publish one user's files to all.
	Allow workspace.Allow
}

// Catalog is the workspace's skill list, re-read when the skills folder
// changes. It is safe for concurrent use.
type Catalog struct {
	ws  *workspace.Workspace
	opt Options
	log *slog.Logger

	scans atomic.Int64

	mu      sync.Mutex // guards the fields below
	stamps  []stamp    // what the last scan saw, in order
	dirs    []string   // skill folder names found by the last listing
	skills  []Skill
	checked time.Time // when requirements were last evaluated
}

// stamp identifies one version of a file or folder without reading it.
type stamp struct {
	rel  string
	ok   bool
	file workspace.Stamp
	mode fs.FileMode
}

// New returns a catalog of ws's skills folder. Nothing is read until the
// first call. A nil log discards.
func New(ws *workspace.Workspace, opt Options, log *slog.Logger) *Catalog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opt.LookPath == nil {
		opt.LookPath = exec.LookPath
	}
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if opt.Recheck <= 0 {
		opt.Recheck = time.Minute
	}
	return &Catalog{ws: ws, opt: opt, log: log}
}

// Scans returns how many times the folder was parsed; an unchanged folder
// is not parsed again.
func (c *Catalog) Scans() int64 { return c.scans.Load() }

// Skills returns the skills in name order, re-reading the folder if it
// changed. A missing skills folder is no skills.
func (c *Catalog) Skills() ([]Skill, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(); err != nil {
		return nil, err
	}
	return slices.Clone(c.skills), nil
}

// refresh re-reads what changed; c.mu is held.
func (c *Catalog) refresh() error {
	root := c.ws.Root()
	top := c.stat(Dir)
	if !top.ok {
		c.stamps, c.dirs, c.skills = nil, nil, nil
		return nil
	}
	if !top.mode.IsDir() {
		return fmt.Errorf("skills: %s in the workspace is not a folder", Dir)
	}
	if len(c.stamps) == 0 || c.stamps[0] != top {
		dirs, err := listDirs(root)
		if err != nil {
			return fmt.Errorf("skills: list %s: %w", Dir, err)
		}
		c.dirs = dirs
	}
	now := []stamp{top}
	for _, d := range c.dirs {
		now = append(now, c.stat(path.Join(Dir, d)), c.stat(path.Join(Dir, d, FileName)))
	}
	if slices.Equal(now, c.stamps) {
		if time.Since(c.checked) >= c.opt.Recheck {
			c.check()
		}
		return nil
	}
	c.stamps = now
	c.scan()
	return nil
}

func (c *Catalog) stat(rel string) stamp {
	fi, err := c.ws.Root().Stat(rel)
	if err != nil {
		return stamp{rel: rel}
	}
	return stamp{rel: rel, ok: true, file: workspace.StampOf(fi), mode: fi.Mode()}
}

// listDirs returns the names of the folders (or links to folders) in
// skills/, sorted, at most MaxSkills.
func listDirs(root *os.Root) ([]string, error) {
	f, err := root.Open(Dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			dirs = append(dirs, e.Name())
		}
	}
	slices.Sort(dirs)
	if len(dirs) > MaxSkills {
		dirs = dirs[:MaxSkills]
	}
	return dirs, nil
}

// scan parses every skill folder; c.mu is held.
func (c *Catalog) scan() {
	c.scans.Add(1)
	var out []Skill
	for _, d := range c.dirs {
		rel := path.Join(Dir, d, FileName)
		if fi, err := c.ws.Root().Stat(path.Join(Dir, d)); err != nil || !fi.IsDir() {
			continue // a file, or a link leading outside the workspace
		}
		s := Skill{Name: d, Path: rel}
		data, err := readCapped(c.ws.Guard(c.opt.Allow), rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // a folder without SKILL.md is not a skill
		case err != nil:
			s.Problem = fmt.Sprintf("%s could not be read: %v", rel, innermost(err))
		default:
			parseInto(&s, d, data)
		}
		out = append(out, s)
	}
	markDuplicates(out)
	slices.SortStableFunc(out, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	c.skills = out
	c.check()
	c.log.Debug("skills scanned", "skills", len(out))
}

// markDuplicates gives every skill whose name another usable skill has a
// Problem. The one kept is the skill in the folder of that name, else the
// first in folder order.
func markDuplicates(list []Skill) {
	keep := map[string]int{}
	for i, s := range list {
		if s.Problem != "" {
			continue
		}
		j, dup := keep[s.Name]
		if !dup || (path.Base(path.Dir(s.Path)) == s.Name && path.Base(path.Dir(list[j].Path)) != s.Name) {
			keep[s.Name] = i
		}
	}
	for i := range list {
		s := &list[i]
		if j, ok := keep[s.Name]; ok && j != i && s.Problem == "" {
			s.Problem = fmt.Sprintf("the name %q is already used by %s", s.Name, list[j].Path)
		}
	}
}

// check evaluates requirements; c.mu is held.
func (c *Catalog) check() {
	c.checked = time.Now()
	for i := range c.skills {
		s := &c.skills[i]
		s.Missing = nil
		for _, b := range s.Requires.Bins {
			if _, err := c.opt.LookPath(b); err != nil {
				s.Missing = append(s.Missing, "program "+b)
			}
		}
		for _, e := range s.Requires.Env {
			if v, ok := c.opt.LookupEnv(e); !ok || v == "" {
				s.Missing = append(s.Missing, "environment variable "+e)
			}
		}
	}
}

func readCapped(g workspace.Guard, rel string) ([]byte, error) {
	f, _, err := g.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSkillBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxSkillBytes)
	}
	return data, nil
}

func innermost(err error) error {
	var pe *fs.PathError
	for errors.As(err, &pe) {
		err = pe.Err
	}
	return err
}

// frontMatter is what SKILL.md's YAML header may hold; unknown keys are
// ignored (other agents' skills carry more).
type frontMatter struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Requires    Requires `yaml:"requires"`
	Metadata    struct {
		Requires Requires `yaml:"requires"`
	} `yaml:"metadata"`
}

// parseInto fills s from SKILL.md's contents; dir is the folder name.
func parseInto(s *Skill, dir string, data []byte) {
	head, ok := splitFrontMatter(data)
	if !ok {
		s.Problem = fmt.Sprintf("%s does not start with a YAML front matter block (--- name, description ---)", s.Path)
		return
	}
	var fm frontMatter
	if err := yaml.Unmarshal(head, &fm); err != nil {
		s.Problem = fmt.Sprintf("%s: invalid front matter: %v", s.Path, err)
		return
	}
	if fm.Name != "" {
		s.Name = strings.TrimSpace(fm.Name)
	}
	s.Description = oneLine(fm.Description)
	s.Requires = Requires{
		Bins: append(slices.Clone(fm.Requires.Bins), fm.Metadata.Requires.Bins...),
		Env:  append(slices.Clone(fm.Requires.Env), fm.Metadata.Requires.Env...),
	}
	switch {
	case !validName.MatchString(s.Name):
		s.Problem = fmt.Sprintf("%s: name %q must be lower-case letters, digits, - and _ (at most 64)", s.Path, s.Name)
		if validName.MatchString(dir) {
			s.Name = dir
		}
	case s.Description == "":
		s.Problem = fmt.Sprintf("%s: description is missing", s.Path)
	}
}

// splitFrontMatter returns the YAML between a leading "---" line and the
// next "---" line.
func splitFrontMatter(data []byte) ([]byte, bool) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	first, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || string(bytes.TrimSpace(first)) != "---" {
		return nil, false
	}
	var head []byte
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if t := bytes.TrimSpace(line); string(t) == "---" || string(t) == "..." {
			return head, true
		}
		head = append(head, line...)
		head = append(head, '\n')
	}
	return nil, false
}

// oneLine collapses white space and bounds the length.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= MaxDescription {
		return s
	}
	cut := MaxDescription
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// Lookup returns the skill called name.
func (c *Catalog) Lookup(name string) (Skill, bool) {
	list, err := c.Skills()
	if err != nil {
		return Skill{}, false
	}
	for _, s := range list {
		if s.Name == name && s.Problem == "" {
			return s, true
		}
	}
	return Skill{}, false
}

// PromptSection returns the "## Skills" section of the system prompt:
// every available skill with its description and SKILL.md path, then the
// unavailable ones with the reason, and how to use them. It returns "" when
// there are no skills. A folder that cannot be read is logged and gives "".
func (c *Catalog) PromptSection() string {
	list, err := c.Skills()
	if err != nil {
		c.log.Warn("skills could not be read", "err", err)
		return ""
	}
	if len(list) == 0 {
		return ""
	}
	var avail, unavail []Skill
	for _, s := range list {
		if s.Available() {
			avail = append(avail, s)
		} else {
			unavail = append(unavail, s)
		}
	}
	var b strings.Builder
	b.WriteString("## Skills\n\n")
	b.WriteString("Skills are instructions for particular tasks, kept in the workspace. Skills are not tools: " +
		"when a request matches a skill's description, first read its SKILL.md with read_file (one skill at a time, only the one you need) " +
		"and follow it; paths in a skill are relative to its folder.\n\n")
	for _, s := range avail {
		fmt.Fprintf(&b, "- %s: %s (%s)\n", s.Name, s.Description, s.Path)
	}
	if len(unavail) > 0 {
		if len(avail) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("Unavailable skills (do not use them; if the user asks for one, explain what is missing so they can set it up):\n")
		for _, s := range unavail {
			desc := s.Description
			if desc == "" {
				desc = "(no description)"
			}
			fmt.Fprintf(&b, "- %s: %s (%s) — %s\n", s.Name, desc, s.Path, s.Reason())
		}
	}
	return b.String()
}

// Knows reports whether name is a usable skill's name (the names Fallback
// answers); it is the known argument of [tools.Registry.WithFallback].
func (c *Catalog) Knows(name string) bool {
	_, ok := c.Lookup(name)
	return ok
}

// Fallback is a [tools.Fallback]: a call to a skill's name as if it were a
// tool returns the skill's SKILL.md with a hint that skills are read, not
// called. Other names report false.
func (c *Catalog) Fallback(ctx context.Context, name string, _ tools.Call) (tools.Result, bool) {
	if ctx.Err() != nil {
		return tools.Result{}, false
	}
	s, ok := c.Lookup(name)
	if !ok {
		return tools.Result{}, false
	}
	data, err := readCapped(c.ws.Guard(c.opt.Allow), s.Path)
	if err != nil {
		return tools.Result{Text: fmt.Sprintf("%q is a skill, not a tool, but its %s could not be read: %v", name, s.Path, innermost(err)), IsError: true}, true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%q is a skill, not a tool: skills are instructions you follow with your other tools, and you read them with read_file. "+
		"Here is %s; follow it now (paths in it are relative to %s/).", name, s.Path, path.Dir(s.Path))
	if !s.Available() {
		fmt.Fprintf(&b, " Note: this skill is unavailable here (%s); tell the user what is missing instead of running it.", s.Reason())
	}
	b.WriteString("\n\n")
	b.WriteString(strings.ToValidUTF8(string(data), "\uFFFD"))
	return tools.Result{Text: b.String()}, true
}
