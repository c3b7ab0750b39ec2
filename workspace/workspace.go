// Package workspace owns the agent's workspace folder: the prompt files
// (AGENT.md, USER.md, RULE.md, MEMORY.md), skills/, the chat inboxes
// (inbox/<channel>/<chat>/, [InboxFolder], [InboxVisible]) and path
// confinement: every access goes through an os.Root, so "..", absolute
// paths and symlinks cannot leave the folder, and [Guard] is the one path
// guard of everything that opens workspace files for a caller: it decides
// on real paths (after symbolic links) with the caller's [Allow] (and,
// for writes, [Guard.Writes]), refuses hard-linked files and catches a
// path swapped between check and open.
//
// [SharedInput] names the agent's shared prompt inputs: the files and
// folders that steer every user's conversation (the prompt files,
// HEARTBEAT.md, skills/, the shared memory), which only an owner may
// change.
//
// [Check] tells `switchboard check` whether a folder could serve as the
// workspace, without creating it.
package workspace

import "strings"

// Prompt file names, in the order they enter the system prompt.
const (
	AgentFile  = "AGENT.md"
	UserFile   = "USER.md"
	RuleFile   = "RULE.md"
	MemoryFile = "MEMORY.md"
)

// PromptFiles lists the prompt files in prompt order.
var PromptFiles = []string{AgentFile, UserFile, RuleFile, MemoryFile}

// Other files and folders of the workspace that other packages keep, named
// here because they define [SharedInput].
const (
	// HeartbeatFile is what the agent's heartbeat turns read and act on
	// (agent/heartbeat).
	HeartbeatFile = "HEARTBEAT.md"
	// SkillsDir holds the skills (workspace/skills).
	SkillsDir = "skills"
	// MemoryDir holds the memory notes (memory/notes): the shared daily
	// notes directly in it, the per-user and per-chat folders below
	// UsersMemoryDir and ChatsMemoryDir.
	MemoryDir      = "memory"
	UsersMemoryDir = MemoryDir + "/users"
	ChatsMemoryDir = MemoryDir + "/chats"
)

// SharedFiles are the shared prompt inputs that are files at the top of
// the workspace; SharedDirs those that are folders there (everything in
// them is shared, except the per-user and per-chat memory folders below
// memory/users/ and memory/chats/).
var (
	SharedFiles = []string{AgentFile, UserFile, RuleFile, MemoryFile, HeartbeatFile}
	SharedDirs  = []string{SkillsDir, MemoryDir}
)

// SharedInput reports whether rel (clean, slash-separated, relative to the
// workspace) is one of the agent's shared prompt inputs, which reach every
// user's conversation: [SharedFiles] at the top of the workspace, and
// everything in [SharedDirs] (skills/, memory/) except what lies below
// memory/users/ and memory/chats/, the per-user and per-chat memory, whose
// folders memory/users and memory/chats are shared themselves (a file put
// in their place would block everyone's memory). The workspace itself
// (".") is not an input.
func SharedInput(rel string) bool {
	for _, f := range SharedFiles {
		if rel == f {
			return true
		}
	}
	for _, own := range []string{UsersMemoryDir, ChatsMemoryDir} {
		if strings.HasPrefix(rel, own+"/") {
			return false
		}
	}
	for _, d := range SharedDirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}
