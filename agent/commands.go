package agent

import (
	"strings"
)

// Command names.
const (
	cmdNone    = ""
	cmdNew     = "new"
	cmdStop    = "stop"
	cmdHelp    = "help"
	cmdStatus  = "status"
	cmdSteer   = "steer"
	cmdCompact = "compact"
	cmdPair    = "pair"
)

const helpText = "Commands:\n" +
	"/new — start a fresh conversation (history stays on disk, memory is kept)\n" +
	"/stop — stop the request that is running now\n" +
	"/steer <text> — redirect the running request (outside one, it is a normal message)\n" +
	"/compact — fold all but the last 2 turns into the summary\n" +
	"/status — show this chat's session state\n" +
	"/pair approve <code> — let in the user who got this pairing code (owners only)\n" +
	"/help — this list\n" +
	"Anything else goes to the assistant."

type command struct {
	name string
	arg  string
}

// parseCommand recognises the runtime's commands: "/name" or "/name@bot",
// optionally followed by an argument. Any other text, including unknown
// slash words, is not a command and goes to the model.
func parseCommand(text string) command {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "/") {
		return command{}
	}
	word, arg := t[1:], ""
	if i := strings.IndexAny(word, " \t\r\n"); i >= 0 {
		word, arg = word[:i], word[i+1:]
	}
	word, _, _ = strings.Cut(word, "@")
	word = strings.ToLower(word)
	switch word {
	case cmdNew, cmdStop, cmdHelp, cmdStatus, cmdSteer, cmdCompact, cmdPair:
		return command{name: word, arg: strings.TrimSpace(arg)}
	}
	return command{}
}
