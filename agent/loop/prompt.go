package loop

// Prompt is the head of a system prompt shared by many turns: text built
// once (the parts of an agent's prompt that are the same for every
// session, see Input.Prefix) with its token count, so that a turn neither
// copies nor counts it again. It is immutable and safe for concurrent use;
// a nil *Prompt is an empty head.
type Prompt struct {
	text  string
	count textCount
	whole bool // text ends with a whole character (endsWhole)
}

// NewPrompt returns the head text.
func NewPrompt(text string) *Prompt {
	return &Prompt{text: text, count: countText(text), whole: endsWhole(text)}
}

// Text returns the head's text ("" for nil).
func (p *Prompt) Text() string {
	if p == nil {
		return ""
	}
	return p.text
}

// SystemTokens is TextTokens(head.Text() + tail), the estimate of a whole
// system prompt, from the head's count and the tail's: the same figure,
// without joining or counting the head again.
func SystemTokens(head *Prompt, tail string) int {
	if head == nil || head.text == "" {
		return TextTokens(tail)
	}
	if !head.whole {
		return TextTokens(head.text + tail) // the boundary splits a character: count as joined
	}
	c := countText(tail)
	c.ascii += head.count.ascii
	c.other += head.count.other
	return c.tokens()
}

// systemTokens is the token estimate of the turn's system prompt.
func (in *Input) systemTokens() int { return SystemTokens(in.Prefix, in.System) }
