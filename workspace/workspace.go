// Package workspace owns the agent's workspace folder: the prompt files
// (AGENT.md, USER.md, RULE.md, MEMORY.md), skills/, the chat inboxes
// (inbox/<channel>/<chat>/, [InboxFolder], [InboxVisible]) and path
// confinement: every access goes through an os.Root, so "..", absolute
// paths and symlinks cannot leave the folder, and [Guard] is the one path
// guard of everything that opens workspace files for a caller: it decides
// on real paths (after symbolic links) with the caller's [Allow], refuses
// hard-linked files and catches a path swapped between check and open.
//
// [Check] tells `switchboard check` whether a folder could serve as the
// workspace, without creating it.
package workspace

// Prompt file names, in the order they enter the system prompt.
const (
	AgentFile  = "AGENT.md"
	UserFile   = "USER.md"
	RuleFile   = "RULE.md"
	MemoryFile = "MEMORY.md"
)

// PromptFiles lists the prompt files in prompt order.
var PromptFiles = []string{AgentFile, UserFile, RuleFile, MemoryFile}
