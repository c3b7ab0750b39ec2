// Package consolidate rewrites MEMORY.md files every night from the
// recent daily notes (memory.consolidate: "23:50").
//
// At the configured local time, for every memory folder (the shared one,
// each user's, each group chat's, each member's notes in a group chat:
// [notes.Notes.AllFolders]) that has daily notes from the last seven
// days and something new since its last rewrite (a changed MEMORY.md, or
// a daily note it has not read in that version), a model is asked to rewrite the
// folder's MEMORY.md from its current content and those notes: merge,
// remove duplicates, resolve conflicts in favour of the newer note, keep
// it under 50 items, invent nothing. The previous MEMORY.md is first
// copied to MEMORY.md.bak-YYYY-MM-DD. A night's run is recorded in a
// [State], so it never runs twice for the same day, across restarts; a
// folder done before a crash is not redone when the run resumes.
package consolidate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
	"github.com/switchboard-chat/switchboard/memory/notes"
)

// Defaults and limits.
const (
	// DefaultLookback is how many days of daily notes a rewrite reads
	// (the run's day included).
	DefaultLookback = 7
	// DefaultMaxTokens bounds the model's answer.
	DefaultMaxTokens = 4000
	// MaxItems is the item budget the model is given.
	MaxItems = 50
	// maxInputBytes bounds the notes sent to the model; the oldest notes
	// are left out first.
	maxInputBytes = 96 << 10
	// maxOutputBytes bounds an acceptable answer.
	maxOutputBytes = 64 << 10
)

// Model streams one chat completion (the agent's model interface;
// *llm.Client satisfies it). Safe for concurrent use.
type Model interface {
	Stream(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error)
}

// Clock tells the time and waits; tests replace it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configure [New].
type Options struct {
	// At is the local time of the nightly run, "HH:MM" (required).
	At string
	// Notes are the memory files (required).
	Notes *notes.Notes
	// Model rewrites the files (required).
	Model Model
	// ModelName is sent as the request's model ("" uses the client's).
	ModelName string
	// State records what ran (required; see OpenState).
	State State
	// Lookback is the number of days of notes read (default 7).
	Lookback int
	// MaxTokens bounds the answer (default 4000).
	MaxTokens int
	// Location is the time zone of At and of the notes' days (default
	// time.Local).
	Location *time.Location
	// Clock is the clock (default: the real one).
	Clock Clock
	// Log receives one line per rewritten folder and failures; nil
	// discards.
	Log *slog.Logger
}

// Consolidator runs the nightly rewrite. Its methods are safe for
// concurrent use, but runs are meant to come from one Run loop.
type Consolidator struct {
	opts         Options
	hour, minute int
	log          *slog.Logger
}

// New validates opts and returns a consolidator. It does no I/O.
func New(opts Options) (*Consolidator, error) {
	var errs []error
	h, m, err := memcfg.ParseClock(opts.At)
	if err != nil {
		errs = append(errs, fmt.Errorf("memory.consolidate: %w", err))
	}
	if opts.Notes == nil {
		errs = append(errs, errors.New("notes are required"))
	}
	if opts.Model == nil {
		errs = append(errs, errors.New("a model is required"))
	}
	if opts.State == nil {
		errs = append(errs, errors.New("a state store is required"))
	}
	if opts.Lookback < 0 || opts.Lookback > 366 {
		errs = append(errs, fmt.Errorf("lookback must be between 1 and 366 days, got %d", opts.Lookback))
	}
	if opts.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("max tokens must not be negative, got %d", opts.MaxTokens))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("consolidate: %w", err)
	}
	if opts.Lookback == 0 {
		opts.Lookback = DefaultLookback
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consolidator{opts: opts, hour: h, minute: m, log: log.With("component", "memory-consolidate")}, nil
}

// Run waits for the configured time every day and consolidates, until ctx
// ends (it then returns nil). When it starts after today's time and today
// has not run yet, it runs at once. A failed run is logged; the next
// attempt is the next day's.
func (c *Consolidator) Run(ctx context.Context) error {
	for {
		now := c.opts.Clock.Now().In(c.opts.Location)
		day := midnight(now)
		next := c.slot(day)
		if !now.Before(next) {
			rep, err := c.RunDay(ctx, day)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				c.log.Error("memory consolidation failed", "day", day.Format(notes.DayLayout), "err", err)
			case !rep.AlreadyDone:
				c.log.Info("memory consolidated", "day", day.Format(notes.DayLayout), "rewritten", rep.Rewritten,
					"unchanged", rep.Unchanged, "failed", rep.Failed)
			}
			next = c.slot(day.AddDate(0, 0, 1))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.opts.Clock.After(next.Sub(now)):
		}
	}
}

// slot is the run time on the given day.
func (c *Consolidator) slot(day time.Time) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day(), c.hour, c.minute, 0, 0, c.opts.Location)
}

func midnight(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
}

// Report counts what one day's run did.
type Report struct {
	// AlreadyDone is set when the day had run before: nothing was done.
	AlreadyDone bool
	// Rewritten folders got a new MEMORY.md; Unchanged ones had no recent
	// or no new notes (or were done earlier the same day); Failed ones
	// are logged and retried on a later night.
	Rewritten, Unchanged, Failed int
}

// RunDay consolidates every folder for the given day (its date in the
// consolidator's location) unless that day already ran. It records the
// day as done when every folder was handled, even if some failed (those
// are tried again on a later night). Errors are returned only for
// failures that stop the whole run (state, listing folders, ctx).
func (c *Consolidator) RunDay(ctx context.Context, day time.Time) (Report, error) {
	day = midnight(day.In(c.opts.Location))
	date := day.Format(notes.DayLayout)
	runKey := "run/" + date
	if _, done, err := c.opts.State.Load(runKey); err != nil {
		return Report{}, err
	} else if done {
		return Report{AlreadyDone: true}, nil
	}
	folders, err := c.opts.Notes.AllFolders()
	if err != nil {
		return Report{}, fmt.Errorf("consolidate: %w", err)
	}
	var rep Report
	for _, f := range folders {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rewritten, err := c.folder(ctx, f, day)
		switch {
		case ctx.Err() != nil:
			return rep, ctx.Err()
		case err != nil:
			rep.Failed++
			c.log.Warn("memory folder not consolidated", "folder", f.Core(), "err", err)
		case rewritten:
			rep.Rewritten++
		default:
			rep.Unchanged++
		}
	}
	if err := c.opts.State.Save(runKey, Record{Day: date, At: c.opts.Clock.Now()}); err != nil {
		return rep, err
	}
	return rep, nil
}

// folder consolidates one folder; false when there was nothing to do.
func (c *Consolidator) folder(ctx context.Context, f notes.Folder, day time.Time) (bool, error) {
	date := day.Format(notes.DayLayout)
	key := "folder/" + f.Dir
	prev, seen, err := c.opts.State.Load(key)
	if err != nil {
		return false, err
	}
	if seen && prev.Day == date {
		return false, nil // done before a restart
	}
	dailies, err := c.opts.Notes.DailyFiles(f, c.opts.Location)
	if err != nil {
		return false, err
	}
	from := day.AddDate(0, 0, 1-c.opts.Lookback)
	var recent []notes.DailyFile
	for _, d := range dailies {
		if !d.Day.Before(from) && !d.Day.After(day) {
			recent = append(recent, d)
		}
	}
	if len(recent) == 0 {
		return false, nil
	}
	core, err := c.readOptional(f.Core())
	if err != nil {
		return false, err
	}
	texts := make([]string, len(recent))
	for i, d := range recent {
		b, err := c.opts.Notes.ReadFile(d.Path)
		if err != nil {
			return false, err
		}
		texts[i] = string(b)
	}
	ids := make([]string, len(recent))
	for i, d := range recent {
		ids[i] = d.Path + ":" + sum(texts[i])
	}
	if seen && prev.Core == sum(core) && subset(ids, prev.Notes) {
		return false, nil // nothing new since the last rewrite
	}
	out, err := c.rewrite(ctx, core, recent, texts)
	if err != nil {
		return false, err
	}
	backup, err := c.opts.Notes.ReplaceCore(f, out, date)
	if err != nil {
		return false, err
	}
	if err := c.opts.State.Save(key, Record{Day: date, Core: sum(out + "\n"), Notes: ids, At: c.opts.Clock.Now()}); err != nil {
		return true, err
	}
	c.log.Info("MEMORY.md rewritten", "file", f.Core(), "backup", backup, "notes", len(recent))
	return true, nil
}

func (c *Consolidator) readOptional(rel string) (string, error) {
	b, err := c.opts.Notes.ReadFile(rel)
	if err != nil {
		if isNotExist(err) {
			return "", nil
		}
		return "", err
	}
	return string(b), nil
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// systemPrompt tells the model how to rewrite MEMORY.md.
const systemPrompt = `You maintain MEMORY.md, the long-term memory an assistant reads at the start of every conversation. Rewrite it from its current content and the recent daily notes you are given.

Rules:
- Keep what will matter later: lasting facts about the people, their preferences, decisions, commitments, ongoing projects, open to-dos and important dates.
- Merge related items and remove duplicates. When notes conflict, keep the most recent (daily notes are dated; newer notes win over older notes and over the current MEMORY.md).
- Drop small talk, finished one-off tasks and details that will not matter again.
- Never invent, guess or embellish: every item must be supported by the input.
- At most 50 items: short "- " bullet points under a few "## " headings, most important first. Put dates on time-bound items.
- Write in the language most of the notes are written in.
- Reply with the complete new MEMORY.md only: no preamble, no explanation, no code fences.`

// rewrite asks the model for the new MEMORY.md and checks the answer.
func (c *Consolidator) rewrite(ctx context.Context, core string, files []notes.DailyFile, texts []string) (string, error) {
	var b strings.Builder
	b.WriteString("## Current MEMORY.md\n\n")
	if strings.TrimSpace(core) == "" {
		b.WriteString("(empty)\n")
	} else {
		b.WriteString(strings.TrimSpace(core))
		b.WriteString("\n")
	}
	b.WriteString("\n## Daily notes (oldest first)\n")
	// Newest notes first into the budget, then printed oldest first.
	budget := maxInputBytes - b.Len()
	first := len(files)
	for i := len(files) - 1; i >= 0; i-- {
		if len(texts[i]) > budget {
			break
		}
		budget -= len(texts[i]) + 32
		first = i
	}
	if first == len(files) { // even the newest note alone is too long: its end
		t := texts[len(texts)-1]
		texts = append(texts[:len(texts)-1:len(texts)-1], t[len(t)-max(budget, 0):])
		first = len(files) - 1
	}
	for i := first; i < len(files); i++ {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n", files[i].Day.Format("2006-01-02 (Monday)"), strings.TrimSpace(texts[i]))
	}
	zero := float32(0)
	resp, err := c.opts.Model.Stream(ctx, llm.Request{
		Model:       c.opts.ModelName,
		Messages:    []llm.Message{{Role: llm.RoleSystem, Content: systemPrompt}, {Role: llm.RoleUser, Content: b.String()}},
		MaxTokens:   c.opts.MaxTokens,
		Temperature: &zero,
	}, nil)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	return cleanAnswer(resp)
}

// cleanAnswer checks the model's answer and strips a code fence around it.
func cleanAnswer(resp *llm.Response) (string, error) {
	if resp == nil {
		return "", errors.New("model returned no answer")
	}
	if resp.FinishReason == llm.FinishLength {
		return "", errors.New("the answer was cut off (max tokens): MEMORY.md left as it was")
	}
	out := strings.TrimSpace(resp.Text)
	if strings.HasPrefix(out, "```") {
		if i := strings.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
		out = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), "```"))
	}
	switch {
	case out == "":
		return "", errors.New("the model's answer is empty: MEMORY.md left as it was")
	case len(out) > maxOutputBytes:
		return "", fmt.Errorf("the model's answer is %d bytes, more than %d: MEMORY.md left as it was", len(out), maxOutputBytes)
	case strings.IndexByte(out, 0) >= 0:
		return "", errors.New("the model's answer contains a NUL byte")
	}
	return out, nil
}
