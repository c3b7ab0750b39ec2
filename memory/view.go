package memory

// View is the long-term memory one turn sees: what the memory facade
// ([github.com/switchboard-chat/switchboard/memory/longterm]) gives the
// agent for a speaker, in place of the workspace's MEMORY.md and USER.md.
// It holds only what that speaker may see: in a group the group's notes
// and the speaker's notes made there, never direct-chat memory.
type View struct {
	// Sections replace the workspace MEMORY.md in the prompt.
	Sections []Section
	// User, when not empty, replaces the workspace USER.md.
	User string
	// Rules tell the model how to recall and when to write.
	Rules string
}

// Section is one long-term memory file shown in the system prompt.
type Section struct {
	Title     string // e.g. "Private notes about the speaker"
	Content   string
	Truncated bool
}
