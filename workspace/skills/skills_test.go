package skills_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
	"github.com/switchboard-chat/switchboard/workspace/skills"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	dir string
	ws  *workspace.Workspace
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	ws, err := workspace.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &env{dir: dir, ws: ws}
}

func (e *env) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeHost is a PATH and environment the test controls.
type fakeHost struct {
	mu   sync.Mutex
	bins map[string]bool
	env  map[string]string
}

func (h *fakeHost) opts() skills.Options {
	return skills.Options{
		LookPath: func(name string) (string, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.bins[name] {
				return "/usr/bin/" + name, nil
			}
			return "", errors.New("not found")
		},
		LookupEnv: func(name string) (string, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			v, ok := h.env[name]
			return v, ok
		},
	}
}

const weather = `---
name: weather
description: >
  Current weather and
  forecasts for a city.
requires:
  bins: [curl]
---
# Weather
Run scripts/get.sh CITY.
`

func TestCatalogListing(t *testing.T) {
	e := newEnv(t)
	host := &fakeHost{bins: map[string]bool{"curl": true}, env: map[string]string{"EMPTY": ""}}
	c := skills.New(e.ws, host.opts(), nil)
	if got := c.PromptSection(); got != "" {
		t.Errorf("PromptSection without a skills folder = %q, want empty", got)
	}

	e.write(t, "skills/weather/SKILL.md", weather)
	e.write(t, "skills/video/SKILL.md", "---\nname: video\ndescription: Cut videos.\nrequires:\n  bins: [ffmpeg]\n  env: [VIDEO_KEY, EMPTY]\n---\nbody\n")
	e.write(t, "skills/legacy/SKILL.md", "---\nname: legacy\ndescription: Old style.\nmetadata:\n  emoji: x\n  requires:\n    env: [LEGACY_TOKEN]\n---\n")
	e.write(t, "skills/broken/SKILL.md", "# no front matter\n")
	e.write(t, "skills/badname/SKILL.md", "---\nname: Bad Name!\ndescription: x\n---\n")
	e.write(t, "skills/nodesc/SKILL.md", "---\nname: nodesc\n---\n")
	e.write(t, "skills/dup/SKILL.md", "---\nname: weather\ndescription: A second weather.\n---\n")
	e.write(t, "skills/empty-folder/notes.txt", "not a skill")
	e.write(t, "skills/README.md", "a file, not a skill")

	list, err := c.Skills()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]skills.Skill{}
	for _, s := range list {
		byName[s.Name] = append(byName[s.Name], s)
	}
	w := byName["weather"]
	if len(w) != 2 {
		t.Fatalf("weather entries = %+v", w)
	}
	if !w[0].Available() && !w[1].Available() {
		t.Errorf("no weather skill is available: %+v", w)
	}
	for _, s := range w {
		if s.Path == "skills/weather/SKILL.md" && (s.Description != "Current weather and forecasts for a city." || !s.Available()) {
			t.Errorf("weather = %+v", s)
		}
		if s.Path == "skills/dup/SKILL.md" && !strings.Contains(s.Reason(), `already used by skills/weather/SKILL.md`) {
			t.Errorf("duplicate = %+v", s)
		}
	}
	checks := []struct{ name, reason string }{
		{"video", "missing program ffmpeg, environment variable VIDEO_KEY, environment variable EMPTY"},
		{"legacy", "missing environment variable LEGACY_TOKEN"},
		{"broken", "does not start with a YAML front matter block"},
		{"badname", `name "Bad Name!" must be lower-case`},
		{"nodesc", "description is missing"},
	}
	for _, ck := range checks {
		got := byName[ck.name]
		if len(got) != 1 || got[0].Available() || !strings.Contains(got[0].Reason(), ck.reason) {
			t.Errorf("%s = %+v, want unavailable: %s", ck.name, got, ck.reason)
		}
	}
	if _, ok := byName["empty-folder"]; ok {
		t.Error("a folder without SKILL.md was listed")
	}

	section := c.PromptSection()
	for _, want := range []string{
		"## Skills",
		"read its SKILL.md with read_file",
		"- weather: Current weather and forecasts for a city. (skills/weather/SKILL.md)\n",
		"Unavailable skills",
		"- video: Cut videos. (skills/video/SKILL.md) — missing program ffmpeg",
		"- nodesc: (no description) (skills/nodesc/SKILL.md) — ",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("PromptSection lacks %q:\n%s", want, section)
		}
	}
	if strings.Index(section, "- weather:") > strings.Index(section, "Unavailable") {
		t.Errorf("available skills must come first:\n%s", section)
	}
}

func TestCatalogRescansOnlyOnChange(t *testing.T) {
	e := newEnv(t)
	host := &fakeHost{bins: map[string]bool{"curl": true}}
	c := skills.New(e.ws, host.opts(), nil)
	e.write(t, "skills/weather/SKILL.md", weather)
	for range 3 {
		c.PromptSection()
	}
	if got := c.Scans(); got != 1 {
		t.Fatalf("Scans() after unchanged calls = %d, want 1", got)
	}

	// An edit of SKILL.md (same size, new mtime).
	p := filepath.Join(e.dir, "skills/weather/SKILL.md")
	e.write(t, "skills/weather/SKILL.md", strings.Replace(weather, "city", "town", 1))
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, future, future); err != nil {
		t.Fatal(err)
	}
	if s := c.PromptSection(); !strings.Contains(s, "for a town") || c.Scans() != 2 {
		t.Errorf("edit not picked up (scans %d):\n%s", c.Scans(), s)
	}
	// A new skill folder.
	e.write(t, "skills/notes/SKILL.md", "---\nname: notes\ndescription: Keep notes.\n---\n")
	if s := c.PromptSection(); !strings.Contains(s, "- notes: Keep notes.") || c.Scans() != 3 {
		t.Errorf("new skill not picked up (scans %d):\n%s", c.Scans(), s)
	}
	// SKILL.md created in a folder that existed before.
	e.write(t, "skills/later/readme.txt", "x")
	c.PromptSection()
	e.write(t, "skills/later/SKILL.md", "---\nname: later\ndescription: Added later.\n---\n")
	if s := c.PromptSection(); !strings.Contains(s, "- later: Added later.") {
		t.Errorf("SKILL.md added to an existing folder not picked up:\n%s", s)
	}
	// Removed.
	if err := os.RemoveAll(filepath.Join(e.dir, "skills/notes")); err != nil {
		t.Fatal(err)
	}
	if s := c.PromptSection(); strings.Contains(s, "notes") {
		t.Errorf("removed skill still listed:\n%s", s)
	}
	// The whole folder removed.
	if err := os.RemoveAll(filepath.Join(e.dir, "skills")); err != nil {
		t.Fatal(err)
	}
	if s := c.PromptSection(); s != "" {
		t.Errorf("PromptSection after removing skills/ = %q", s)
	}
}

func TestCatalogRechecksRequirements(t *testing.T) {
	e := newEnv(t)
	host := &fakeHost{bins: map[string]bool{}}
	opt := host.opts()
	opt.Recheck = time.Nanosecond
	c := skills.New(e.ws, opt, nil)
	e.write(t, "skills/weather/SKILL.md", weather)
	if s := c.PromptSection(); !strings.Contains(s, "missing program curl") {
		t.Fatalf("curl should be missing:\n%s", s)
	}
	host.mu.Lock()
	host.bins["curl"] = true
	host.mu.Unlock()
	if s := c.PromptSection(); strings.Contains(s, "missing") || c.Scans() != 1 {
		t.Errorf("installed program not noticed without a rescan (scans %d):\n%s", c.Scans(), s)
	}
}

func TestCatalogSymlinkOutsideIgnored(t *testing.T) {
	e := newEnv(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "SKILL.md"), []byte("---\nname: evil\ndescription: From outside.\n---\nSECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "skills"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.dir, "skills", "evil")); err != nil {
		t.Fatal(err)
	}
	e.write(t, "skills/linked/x", "")
	if err := os.Symlink(filepath.Join(outside, "SKILL.md"), filepath.Join(e.dir, "skills/linked/SKILL.md")); err != nil {
		t.Fatal(err)
	}
	c := skills.New(e.ws, skills.Options{}, nil)
	s := c.PromptSection()
	if strings.Contains(s, "From outside") {
		t.Errorf("a skill outside the workspace was read:\n%s", s)
	}
	if r, ok := c.Fallback(t.Context(), "evil", tools.Call{}); ok {
		t.Errorf("Fallback(evil) = %+v", r)
	}
}

func TestCatalogFallback(t *testing.T) {
	e := newEnv(t)
	host := &fakeHost{bins: map[string]bool{}}
	c := skills.New(e.ws, host.opts(), nil)
	e.write(t, "skills/weather/SKILL.md", weather)
	e.write(t, "skills/broken/SKILL.md", "no front matter")

	res, ok := c.Fallback(t.Context(), "weather", tools.Call{})
	if !ok || res.IsError {
		t.Fatalf("Fallback(weather) = %+v, %v", res, ok)
	}
	for _, want := range []string{`"weather" is a skill, not a tool`, "read_file", "skills/weather/SKILL.md", "relative to skills/weather/", "Run scripts/get.sh CITY.", "unavailable here (missing program curl)"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("Fallback text lacks %q:\n%s", want, res.Text)
		}
	}
	for _, name := range []string{"broken", "nope", "Weather"} {
		if _, ok := c.Fallback(t.Context(), name, tools.Call{}); ok {
			t.Errorf("Fallback(%s) answered", name)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ok := c.Fallback(ctx, "weather", tools.Call{}); ok {
		t.Error("Fallback answered with a cancelled context")
	}

	// Wired into a registry.
	reg, _ := tools.NewRegistry()
	withSkills := reg.WithFallback(c.Fallback, c.Knows)
	r := withSkills.Run(t.Context(), "weather", tools.Call{})
	if r.IsError || !strings.Contains(r.Text, "# Weather") {
		t.Errorf("registry with skill fallback = %+v", r)
	}
	if !withSkills.Known("weather") || withSkills.Known("broken") || withSkills.Known("nope") {
		t.Error("Known does not follow the skills")
	}
}

func TestCatalogConcurrent(t *testing.T) {
	e := newEnv(t)
	c := skills.New(e.ws, skills.Options{}, nil)
	var n atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 20 {
				if i == 0 {
					e.write(t, "skills/s"+string(rune('a'+j%5))+"/SKILL.md", "---\nname: s\ndescription: d\n---\n")
				}
				if c.PromptSection() != "" {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n.Load() == 0 {
		t.Error("no call saw a skill")
	}
}

func TestSkillsNotAFolder(t *testing.T) {
	e := newEnv(t)
	e.write(t, "skills", "a file")
	c := skills.New(e.ws, skills.Options{}, nil)
	if _, err := c.Skills(); err == nil {
		t.Error("skills as a file gave no error")
	}
	if s := c.PromptSection(); s != "" {
		t.Errorf("PromptSection = %q", s)
	}
}
