package memory

import "strings"

// PromptRules returns the memory rules for the system prompt (DESIGN.md
// §6.1: "memory rules"): how to recall and when to write, with the memory
// tools of this package. shared is memory.scope "shared"; group is true
// for a group chat.
func PromptRules(shared, group bool) string {
	var b strings.Builder
	b.WriteString(`## Memory

You have long-term memory beyond this conversation:
- MEMORY.md (core memory) is shown below: lasting facts and preferences. Trust it, but the newest information wins.
- Daily notes hold summaries of earlier conversations, decisions and to-dos. They are not shown: search them.

Recall: before saying you do not know or do not remember something — a person, a preference, an earlier decision, a date, "what did we say about ..." — call memory_search with a few keywords (any language), then memory_get to read more around a hit.

Write with memory_write (the file is chosen for you):
- kind "core" when the user tells you a lasting fact or preference, asks you to remember something, or a decision will matter for weeks;
- kind "daily" for what happened today: decisions, commitments, to-dos, results.
One short self-contained statement per call, with names and absolute dates ("2025-03-14", not "next Friday"). Do not store secrets (passwords, keys, card numbers) or small talk; do not repeat what MEMORY.md already says.
`)
	if group && !shared {
		b.WriteString(`
This is a group chat. Memory here is this group's only: what anyone told you in a private chat is not available in the group, and you must not ask for it. memory_write keeps a note about the person speaking now in their notes for this group (scope "me", the default; seen only in their messages here) or, with scope "group", in this group's notes that every member's messages see: use "group" for what concerns the group (plans, decisions, agreements), "me" for one person's preferences. The speaker's notes shown below belong to the person speaking now: use them to help that person, and do not reveal them to others in the group unless that person asks you to.
`)
	}
	return b.String()
}
