package openai

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/switchboard-chat/switchboard/bus"
)

// Request headers.
const (
	headerSession     = "X-Switchboard-Session"
	headerIdempotency = "Idempotency-Key"
	// maxSessionBytes bounds a session name (header or "user" field) and
	// an Idempotency-Key.
	maxSessionBytes = 512
)

// knownRoles are the message roles OpenAI accepts.
var knownRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// chatRequest is a decoded, checked chat completion request.
type chatRequest struct {
	model         string
	stream        bool
	includeUsage  bool
	session       string // "" is stateless
	idempotency   string
	last          goopenai.ChatCompletionMessage
	earlier       []goopenai.ChatCompletionMessage // before the last user message
	lastUserIndex int
}

// parseChat decodes and checks a request body.
func parseChat(r *http.Request, body []byte) (*chatRequest, *httpError) {
	var req goopenai.ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("", "", fmt.Sprintf("We could not parse the JSON body of your request (%s). The body must be a chat completion request.", jsonReason(err)))
	}
	var raw struct {
		Messages json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &raw)
	if len(raw.Messages) == 0 || string(raw.Messages) == "null" {
		return nil, badRequest("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	if req.Model == "" {
		return nil, badRequest("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	last := -1
	for i, m := range req.Messages {
		if !knownRoles[m.Role] {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "invalid_value",
				fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role))
		}
		if m.Role == "user" {
			last = i
		}
	}
	if last < 0 {
		return nil, badRequest("messages", "invalid_value", "Invalid 'messages': no message has the role 'user'. The last user message is the input of the agent's turn.")
	}
	cr := &chatRequest{model: req.Model, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		last: req.Messages[last], earlier: req.Messages[:last], lastUserIndex: last}
	if text, atts := content(cr.last); strings.TrimSpace(text) == "" && len(atts) == 0 {
		return nil, badRequest(fmt.Sprintf("messages[%d].content", last), "invalid_value", "Invalid 'content': the last user message is empty.")
	}
	cr.session = r.Header.Get(headerSession)
	param := "header " + headerSession
	if cr.session == "" {
		cr.session, param = req.User, "user"
	}
	if len(cr.session) > maxSessionBytes {
		return nil, badRequest(param, "string_above_max_length", fmt.Sprintf("Invalid '%s': string too long. Expected a string with maximum length %d.", param, maxSessionBytes))
	}
	cr.idempotency = r.Header.Get(headerIdempotency)
	if len(cr.idempotency) > maxSessionBytes {
		return nil, badRequest("header "+headerIdempotency, "string_above_max_length", fmt.Sprintf("Invalid '%s': string too long. Expected a string with maximum length %d.", headerIdempotency, maxSessionBytes))
	}
	return cr, nil
}

// jsonReason describes a decoding error without echoing the body.
func jsonReason(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return "not a JSON object"
}

// content returns a message's text (its text parts joined by newlines) and
// its images as attachments.
func content(m goopenai.ChatCompletionMessage) (string, []bus.Attachment) {
	if len(m.MultiContent) == 0 {
		return m.Content, nil
	}
	var texts []string
	var atts []bus.Attachment
	for _, p := range m.MultiContent {
		switch p.Type {
		case goopenai.ChatMessagePartTypeText:
			texts = append(texts, p.Text)
		case goopenai.ChatMessagePartTypeImageURL:
			if p.ImageURL != nil {
				atts = append(atts, imageAttachment(p.ImageURL.URL))
			}
		}
	}
	return strings.Join(texts, "\n"), atts
}

// imageAttachment turns an image_url (a data: URL or an http(s) URL) into
// an attachment.
func imageAttachment(u string) bus.Attachment {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, _ := strings.Cut(rest, ",")
		mime, _, _ := strings.Cut(meta, ";")
		return bus.Attachment{Kind: bus.AttachImage, Data: data, MIME: mime}
	}
	return bus.Attachment{Kind: bus.AttachImage, URL: u}
}

// chatID is the bus chat id of a request: the key's user and a digest of
// the session name, or a fresh one-off id without a session. The user
// cannot contain ':' (Config.Validate), so no two users share a chat.
func chatID(user, session string) string {
	if session == "" {
		return user + ":once-" + strings.ToLower(rand.Text())
	}
	d := sha256.Sum256([]byte(session))
	return fmt.Sprintf("%s:s-%x", user, d[:16])
}

// turnText is the text of the turn's inbound envelope: the last user
// message, and in stateless mode the request's earlier messages before it
// as context (the agent has no history of a fresh chat).
func (cr *chatRequest) turnText() (string, []bus.Attachment) {
	text, atts := content(cr.last)
	if cr.session != "" || len(cr.earlier) == 0 {
		return text, atts
	}
	var b strings.Builder
	b.WriteString("Earlier messages of this conversation, as the client sent them (you have no other record of it):\n\n")
	for _, m := range cr.earlier {
		t, _ := content(m)
		if strings.TrimSpace(t) == "" {
			continue
		}
		fmt.Fprintf(&b, "[%s]\n%s\n\n", m.Role, t)
	}
	b.WriteString("The user's new message, which you answer now:\n\n")
	b.WriteString(text)
	return b.String(), atts
}
