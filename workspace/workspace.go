// Package workspace owns the agent's workspace folder: the prompt files
// (AGENT.md, USER.md, RULE.md, MEMORY.md), skills/, and path confinement for
// the file tools (every access goes through an os.Root, so "..", absolute
// paths and symlinks cannot leave the folder).
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
