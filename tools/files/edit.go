package files

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/switchboard-chat/switchboard/tools"
	"github.com/switchboard-chat/switchboard/workspace"
)

type editFile struct{ guarded }

func (*editFile) Name() string { return "edit_file" }

func (*editFile) Description() string {
	return "Edit a text file in the workspace by exact text replacement. old_text must match the file exactly " +
		"(including whitespace and line breaks) and exactly once, unless replace_all is true. " +
		"With an empty old_text, new_text is appended to the end of the file (the file is created if missing)."
}

// editFileSchema is editFile's argument schema, built once (Schema hands out the
// same bytes; callers must not modify them).
var editFileSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace."},` +
	`"old_text":{"type":"string","description":"Exact text to replace; empty to append new_text to the file."},` +
	`"new_text":{"type":"string","description":"Replacement text (may be empty to delete old_text)."},` +
	`"replace_all":{"type":"boolean","description":"Replace every occurrence of old_text instead of requiring exactly one. Default false."}` +
	`},"required":["path","old_text","new_text"],"additionalProperties":false}`)

func (*editFile) Schema() json.RawMessage { return editFileSchema }

func (*editFile) Permission() string { return tools.PermWrite }
func (*editFile) ParallelSafe() bool { return false }

type editArgs struct {
	Path       string  `json:"path"`
	OldText    *string `json:"old_text"`
	NewText    *string `json:"new_text"`
	ReplaceAll bool    `json:"replace_all"`
}

func (t *editFile) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	var a editArgs
	if err := tools.DecodeArgs(call.Args, &a); err != nil {
		return tools.Result{}, err
	}
	rel, err := t.resolve(call.Session, a.Path, true)
	if err != nil {
		return tools.Result{}, err
	}
	switch {
	case a.OldText == nil:
		return tools.Result{}, fmt.Errorf("%w: old_text is required (use \"\" to append)", tools.ErrBadArgs)
	case a.NewText == nil:
		return tools.Result{}, fmt.Errorf("%w: new_text is required (use \"\" to delete old_text)", tools.ErrBadArgs)
	case rel == ".":
		return tools.Result{}, fmt.Errorf("%w: path must name a file, not the workspace folder", tools.ErrBadArgs)
	}
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	name := display(rel)
	oldText, newText := *a.OldText, *a.NewText
	if oldText == "" {
		return t.appendText(t.fs(call.Session), rel, name, newText)
	}
	if oldText == newText {
		return tools.Result{}, fmt.Errorf("%w: old_text and new_text are identical; nothing to change", tools.ErrBadArgs)
	}
	g := t.fs(call.Session)
	content, err := t.readText(g, rel, name)
	if err != nil {
		return tools.Result{}, err
	}
	count := strings.Count(content, oldText)
	switch {
	case count == 0:
		return tools.Result{}, fmt.Errorf("old_text not found in %s; it must match the file exactly, including whitespace (read the file again to check)", name)
	case count > 1 && !a.ReplaceAll:
		return tools.Result{}, fmt.Errorf("old_text matches %d times in %s; add surrounding text to make it unique, or set replace_all to true", count, name)
	}
	updated := strings.Replace(content, oldText, newText, -1)
	if _, err := writeWhole(g, rel, []byte(updated)); err != nil {
		return tools.Result{}, describe("write", name, err)
	}
	plural := "s"
	if count == 1 {
		plural = ""
	}
	return tools.Result{Text: fmt.Sprintf("Replaced %d occurrence%s in %s (%d -> %d bytes)", count, plural, name, len(content), len(updated))}, nil
}

// readText loads a whole text file for editing.
func (t *editFile) readText(g workspace.Guard, rel, name string) (string, error) {
	f, _, err := g.Open(rel)
	if err != nil {
		return "", describe("read", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", describe("read", name, err)
	}
	switch {
	case fi.IsDir():
		return "", fmt.Errorf("%s is a directory, not a file", name)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", name)
	case fi.Size() > MaxEditBytes:
		return "", fmt.Errorf("%s is %d bytes; edit_file edits files up to %d bytes", name, fi.Size(), MaxEditBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxEditBytes+1))
	if err != nil {
		return "", describe("read", name, err)
	}
	if looksBinary(b[:min(len(b), sniffLen)]) {
		return "", fmt.Errorf("%s is a binary file; edit_file edits only UTF-8 text", name)
	}
	return string(b), nil
}

// appendText appends text to rel, creating it and its folders if missing.
func (t *editFile) appendText(g workspace.Guard, rel, name, text string) (tools.Result, error) {
	if text == "" {
		return tools.Result{}, fmt.Errorf("%w: old_text and new_text are both empty; nothing to change", tools.ErrBadArgs)
	}
	if fi, err := t.ws.Root().Lstat(rel); err == nil && fi.IsDir() {
		return tools.Result{}, fmt.Errorf("%s is a directory, not a file", name)
	}
	f, existed, err := openForWrite(g, rel, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return tools.Result{}, describe("append to", name, err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return tools.Result{}, describe("append to", name, err)
	}
	if !existed {
		return tools.Result{Text: fmt.Sprintf("Created %s with %d bytes", name, len(text))}, nil
	}
	return tools.Result{Text: fmt.Sprintf("Appended %d bytes to %s", len(text), name)}, nil
}
