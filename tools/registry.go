package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/switchboard-chat/switchboard/internal/failpoint"
)

// validName is the pattern tool names must match (the OpenAI function name
// rule).
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// NoOutput replaces an empty result text.
const NoOutput = "(no output)"

// Registry is an immutable set of tools, built once in main. It is safe
// for concurrent use.
type Registry struct {
	tools    []Tool
	byName   map[string]Tool
	log      *slog.Logger
	fallback Fallback
	known    func(name string) bool
}

// Fallback answers a call to a name that no tool has, e.g. a skill's name
// (the skill catalog returns its SKILL.md). It reports false when it does
// not know the name either; the registry then returns its usual "unknown
// tool" error result. It must be safe for concurrent use and honour ctx.
type Fallback func(ctx context.Context, name string, call Call) (Result, bool)

// NewRegistry validates and registers ts in order. It rejects nil tools,
// names not matching ^[a-zA-Z0-9_-]{1,64}$, duplicate names
// ([ErrDuplicateTool]), unknown permission classes and schemas that are not
// a JSON object with "type": "object". The registry logs nothing until
// given a logger with [Registry.WithLogger].
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{
		byName: make(map[string]Tool, len(ts)),
		log:    slog.New(slog.DiscardHandler),
	}
	var errs []error
	for i, t := range ts {
		if err := ValidateTool(t); err != nil {
			errs = append(errs, fmt.Errorf("tool %d: %w", i, err))
			continue
		}
		name := t.Name()
		if _, dup := r.byName[name]; dup {
			errs = append(errs, fmt.Errorf("tool %d: %w: %q", i, ErrDuplicateTool, name))
			continue
		}
		r.byName[name] = t
		r.tools = append(r.tools, t)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("tools: new registry: %w", errors.Join(errs...))
	}
	return r, nil
}

// ValidateTool checks what [NewRegistry] checks of one tool: not nil, a
// name matching ^[a-zA-Z0-9_-]{1,64}$, a known permission class and an
// object schema. Tools that join later (MCP) are checked with it too.
func ValidateTool(t Tool) error {
	if t == nil {
		return errors.New("tool is nil")
	}
	name := t.Name()
	if !validName.MatchString(name) {
		return fmt.Errorf("name %q must match %s", name, validName)
	}
	switch p := t.Permission(); p {
	case PermRead, PermWrite, PermExec, PermNetwork, PermMessage:
	default:
		return fmt.Errorf("tool %q: permission %q is not one of read, write, exec, network, message", name, p)
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(t.Schema(), &schema); err != nil || schema == nil {
		return fmt.Errorf("tool %q: schema is not a JSON object", name)
	}
	var typ string
	if err := json.Unmarshal(schema["type"], &typ); err != nil || typ != "object" {
		return fmt.Errorf(`tool %q: schema must have "type": "object"`, name)
	}
	return nil
}

// WithLogger returns a registry with the same tools that logs to log (nil
// discards). The receiver is unchanged.
func (r *Registry) WithLogger(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := *r
	c.log = log
	return &c
}

// WithFallback returns a registry with the same tools whose Run hands calls
// to unknown names to f first (nil removes the fallback). known, when not
// nil, reports without running anything whether f answers a name; [Registry.Known]
// uses it. The receiver is unchanged.
func (r *Registry) WithFallback(f Fallback, known func(name string) bool) *Registry {
	c := *r
	c.fallback, c.known = f, known
	return &c
}

// Known reports whether the model may call name: a tool offered to it, or
// a name the fallback answers (e.g. a skill). The agent's executor uses it
// to tell a call to a skill from a call to a tool that does not exist.
func (r *Registry) Known(name string) bool {
	if t, ok := r.byName[name]; ok {
		return StageOf(t) == StageModel
	}
	return r.fallback != nil && r.known != nil && r.known(name)
}

// ValidName reports whether name is a valid tool name
// (^[a-zA-Z0-9_-]{1,64}$).
func ValidName(name string) bool { return validName.MatchString(name) }

// Get returns the tool registered under name.
func (r *Registry) Get(name string) (Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// List returns the tools offered to the model (stage StageModel), in
// registration order. The slice is a copy.
func (r *Registry) List() []Tool {
	out := make([]Tool, 0, len(r.tools))
	for _, t := range r.tools {
		if StageOf(t) == StageModel {
			out = append(out, t)
		}
	}
	return out
}

// PostTurn returns the post-turn tools (stage StagePostTurn) in
// registration order.
func (r *Registry) PostTurn() []Tool {
	var out []Tool
	for _, t := range r.tools {
		if StageOf(t) == StagePostTurn {
			out = append(out, t)
		}
	}
	return out
}

// Names returns the names of the tools offered to the model, in
// registration order.
func (r *Registry) Names() []string {
	var names []string
	for _, t := range r.List() {
		names = append(names, t.Name())
	}
	return names
}

// Run calls the tool name and returns what the model should see. It never
// fails and never returns an empty Text:
//
//   - an unknown name goes to the fallback (see [Registry.WithFallback]);
//     when there is none or it does not know the name either, the result is
//     an error listing the available tools;
//   - a returned error gives Result{Text: "Error: " + err.Error(), IsError: true};
//   - a panic is recovered into "Error: tool X failed unexpectedly: ..." and
//     logged with its stack at Error level;
//   - an error result whose text lacks the "Error:" prefix gets it;
//   - an empty text becomes "(no output)".
//
// Run blocks until the tool returns; the tool must honour ctx.
func (r *Registry) Run(ctx context.Context, name string, call Call) (res Result) {
	t, ok := r.byName[name]
	if ok && StageOf(t) != StageModel {
		ok = false // post-turn tools are not the model's to call
	}
	if !ok {
		return r.unknown(ctx, name, call, r.Names())
	}
	return r.run(ctx, t, call)
}

// unknown answers a call to a name no tool has: the fallback's answer, or an
// error result listing names.
func (r *Registry) unknown(ctx context.Context, name string, call Call, names []string) (res Result) {
	if r.fallback != nil {
		defer func() {
			if p := recover(); p != nil {
				r.log.ErrorContext(ctx, "tool fallback panicked", "tool", name, "call_id", call.ID,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				res = errorResult(fmt.Sprintf("tool %s failed unexpectedly: %v", name, p))
			}
		}()
		if out, ok := r.fallback(ctx, name, call); ok {
			return normalize(out)
		}
	}
	avail := strings.Join(names, ", ")
	if avail == "" {
		avail = "(none)"
	}
	return errorResult(fmt.Sprintf("unknown tool %q; available tools: %s", name, avail))
}

// RunPostTurn runs the post-turn tool t with the same guarantees as Run.
func (r *Registry) RunPostTurn(ctx context.Context, t Tool, call Call) Result {
	return r.run(ctx, t, call)
}

func (r *Registry) run(ctx context.Context, t Tool, call Call) (res Result) {
	name := t.Name()
	if err := ctx.Err(); err != nil {
		return errorResult(fmt.Sprintf("tool %s was not run: %v", name, err))
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "tool panicked", "tool", name, "call_id", call.ID, "session", call.Session.Key,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res = errorResult(fmt.Sprintf("tool %s failed unexpectedly: %v", name, p))
		}
	}()
	failpoint.Hit(failpoint.MidTool)
	out, err := t.Run(ctx, call)
	if err != nil {
		r.log.DebugContext(ctx, "tool returned an error", "tool", name, "call_id", call.ID, "err", err)
		out = Result{Text: err.Error(), IsError: true, Files: out.Files, Images: out.Images, Denied: errors.Is(err, ErrDenied)}
	}
	return normalize(out)
}

func errorResult(msg string) Result {
	return normalize(Result{Text: msg, IsError: true})
}

func normalize(res Result) Result {
	if strings.TrimSpace(res.Text) == "" {
		if res.IsError {
			res.Text = "Error: " + NoOutput
		} else {
			res.Text = NoOutput
		}
		return res
	}
	if res.IsError && !strings.HasPrefix(res.Text, "Error:") {
		res.Text = "Error: " + res.Text
	}
	return res
}

// DecodeArgs decodes a tool's JSON arguments into v strictly: the
// arguments must be one JSON object (empty means {}), unknown fields and
// wrong types are errors. Errors wrap [ErrBadArgs] and name the field.
func DecodeArgs(raw json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		return fmt.Errorf("%w: arguments must be a JSON object", ErrBadArgs)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s", ErrBadArgs, describeDecodeError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: unexpected data after the arguments object", ErrBadArgs)
	}
	return nil
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(arguments)"
		}
		return fmt.Sprintf("field %q must be %s, got %s", field, jsonTypeName(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of input"
	}
	// Unknown fields: `json: unknown field "x"`.
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonTypeName turns a Go kind into the JSON type a model understands.
func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "a value of the right type"
	}
	return "a " + kind
}
