package llm_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/switchboard-chat/switchboard/llm"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

func ExampleClient_Stream() {
	h := llmtest.NewHandler()
	h.Enqueue(llmtest.Reply{Text: "Hello there!", ChunkSize: 4})
	srv := httptest.NewServer(h)
	defer srv.Close()

	cfg := llm.DefaultConfig()
	cfg.BaseURL = srv.URL + "/v1" // a local server needs no API key
	c, err := llm.New(cfg, nil, llm.WithHTTPClient(srv.Client()))
	if err != nil {
		fmt.Println(err)
		return
	}
	var pieces []string
	resp, err := c.Stream(context.Background(), llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "Hi"}},
	}, func(d llm.Delta) { pieces = append(pieces, d.Text) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(pieces, "|"))
	fmt.Println(resp.Text, resp.FinishReason)
	// Output:
	// Hell|o th|ere!
	// Hello there! stop
}
