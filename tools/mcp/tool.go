package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-chat/switchboard/tools"
)

// maxDescription bounds a tool description taken from a server.
const maxDescription = 2000

// ToolName is the name an MCP server's tool gets in Switchboard:
// "mcp_<server>_<tool>" with every character outside [a-zA-Z0-9_-]
// replaced by "_"; a name longer than 64 characters is cut and ends in
// "_" and 8 hex digits of a hash of the full name, so that it stays
// unique and stable.
func ToolName(server, tool string) string {
	var b strings.Builder
	b.WriteString("mcp_")
	b.WriteString(server)
	b.WriteByte('_')
	for _, r := range tool {
		if r < 128 && (r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return name[:55] + "_" + hex.EncodeToString(sum[:4])
}

// remoteTool is one tool of a connected server, as offered to the model.
type remoteTool struct {
	name    string // Switchboard's name
	server  string
	remote  string // the server's name for it
	desc    string
	schema  json.RawMessage
	perm    string
	par     bool
	timeout time.Duration
	session *sdk.ClientSession
	red     redactor // the server's secrets, hidden in call errors
}

// newRemoteTool adapts t of server; it fails for a tool whose input schema
// is not a JSON object schema.
func newRemoteTool(server string, t *sdk.Tool, cs *sdk.ClientSession, timeout time.Duration, red redactor) (*remoteTool, error) {
	schema, err := objectSchema(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = t.Title
	}
	if len(desc) > maxDescription {
		desc = strings.ToValidUTF8(desc[:maxDescription], "") + "…"
	}
	desc = fmt.Sprintf("[MCP server %s] %s", server, desc)
	rt := &remoteTool{name: ToolName(server, t.Name), server: server, remote: t.Name, desc: desc, schema: schema,
		perm: tools.PermExec, timeout: timeout, session: cs, red: red}
	if a := t.Annotations; a != nil && a.ReadOnlyHint {
		rt.perm, rt.par = tools.PermRead, true
	}
	return rt, nil
}

// objectSchema turns an input schema from the wire into a JSON object
// schema with "type": "object".
func objectSchema(s any) (json.RawMessage, error) {
	if s == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("input schema is not a JSON object")
	}
	typ, ok := m["type"]
	if !ok {
		m["type"] = json.RawMessage(`"object"`)
		return json.Marshal(m)
	}
	if string(typ) != `"object"` {
		return nil, fmt.Errorf("input schema has type %s, want object", typ)
	}
	return raw, nil
}

func (t *remoteTool) Name() string            { return t.name }
func (t *remoteTool) Description() string     { return t.desc }
func (t *remoteTool) Schema() json.RawMessage { return t.schema }
func (t *remoteTool) Permission() string      { return t.perm }
func (t *remoteTool) ParallelSafe() bool      { return t.par }

// Run calls the tool on its server. A result the server marks isError is
// an error result (so the executor's circuit breakers count it); text
// content becomes the text, image content is passed through as images.
func (t *remoteTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	args := call.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) || strings.TrimSpace(string(args))[0] != '{' {
		return tools.Result{}, fmt.Errorf("%w: arguments must be a JSON object", tools.ErrBadArgs)
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	res, err := t.session.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return tools.Result{}, fmt.Errorf("MCP server %s: %s timed out after %s", t.server, t.remote, t.timeout)
		}
		return tools.Result{}, fmt.Errorf("MCP server %s: %s: %w", t.server, t.remote, t.red.err(err))
	}
	out := convert(res)
	out.IsError = res.IsError
	return out, nil
}

// convert turns an MCP result into a tool result.
func convert(res *sdk.CallToolResult) tools.Result {
	var out tools.Result
	var parts []string
	for i, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			name := fmt.Sprintf("image-%d%s", i+1, extFor(c.MIMEType))
			out.Images = append(out.Images, tools.File{Name: name, MIME: c.MIMEType, Data: c.Data})
			parts = append(parts, fmt.Sprintf("[image %s: %s, %d bytes]", name, c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil {
				if r.Text != "" {
					parts = append(parts, r.Text)
				} else {
					parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
				}
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	out.Text = strings.Join(parts, "\n")
	return out
}

func extFor(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	}
	return ""
}
