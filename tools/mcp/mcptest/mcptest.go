// Package mcptest is the MCP server of the tests: tools/mcp's, and the
// daemon's (`switchboard doctor` counts its tools). Its tools: echo, add,
// fail, image, slow, env, exit, look, grow, and three with names to
// sanitize (weird.name/x, a.b, a_b).
package mcptest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeHTTP serves [Server] over streamable HTTP until the test ends and
// returns its URL.
func ServeHTTP(t testing.TB) string {
	t.Helper()
	srv := Server()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}

// PNG is the image the "image" tool returns.
var PNG = []byte("\x89PNG\r\n\x1a\nfake")

type echoIn struct {
	Text string `json:"text"`
}
type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}
type addOut struct {
	Sum int `json:"sum"`
}
type none struct{}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// Server is the MCP server the tests talk to, over stdio (in a child
// process) and over HTTP (in-process, [ServeHTTP]).
func Server() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "test-server", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo the text."}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return text("echo: " + in.Text), nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "Add two numbers."}, func(_ context.Context, _ *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "image", Description: "Returns an image."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a picture"}, &sdk.ImageContent{Data: PNG, MIMEType: "image/png"}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Never answers."}, func(ctx context.Context, _ *sdk.CallToolRequest, _ none) (*sdk.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	sdk.AddTool(s, &sdk.Tool{Name: "env", Description: "Shows the environment."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		_, leaked := os.LookupEnv("SWITCHBOARD_TEST_SECRET_TOKEN")
		return text("value=" + os.Getenv("MCP_TEST_VALUE") + " leaked=" + map[bool]string{true: "yes", false: "no"}[leaked]), nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "exit", Description: "Stops the server process."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		os.Exit(0)
		return nil, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "look", Description: "Read-only.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		return text("looked"), nil, nil
	})
	raw := func(name string) (*sdk.Tool, sdk.ToolHandler) {
		return &sdk.Tool{Name: name, Description: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return text("I am " + name), nil
			}
	}
	s.AddTool(raw("weird.name/x"))
	s.AddTool(raw("a.b"))
	s.AddTool(raw("a_b"))
	sdk.AddTool(s, &sdk.Tool{Name: "grow", Description: "Adds the tool late."}, func(context.Context, *sdk.CallToolRequest, none) (*sdk.CallToolResult, any, error) {
		s.AddTool(raw("late"))
		return text("grown"), nil, nil
	})
	return s
}
