package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Circuit-breaker thresholds (cowagent.md §1.8), over the last
// breakerWindow tool calls of a turn.
const (
	breakerWindow         = 50
	SameCallLimit         = 5 // same tool + args, consecutive calls, success or not (run, served again or rolled back) → the next is blocked; one more → the run stops
	sameCallFailLimit     = 3 // same tool + args, consecutive failures → blocked
	sameToolFailLimit     = 6 // same tool, any args, consecutive failures → blocked
	sameToolAbortLimit    = 8 // same tool, any args, consecutive failures → the run ends
	repeatedSuccessesHint = 3 // identical successful calls before the "answer now" hint
)

// callRecord is one tool call in the breaker's history.
type callRecord struct {
	tool string
	args string // hash of the canonical JSON arguments
	ok   bool
}

// breaker watches a turn's tool calls for loops and repeated failures.
// It is used from the turn's goroutine only.
type breaker struct {
	hist     []callRecord
	hintSent bool
}

// verdict of a check.
type verdict int

const (
	allow verdict = iota
	block
	abort
	// halt: the model repeats a call it was told to stop making; the run
	// ends with the forced summary.
	halt
)

// argsHash hashes the canonical form of JSON arguments (object keys
// sorted, insignificant whitespace removed).
func argsHash(args []byte) string {
	var v any
	canon := args
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:8])
}

// check decides whether a call may run, and why not.
func (b *breaker) check(tool, hash string) (verdict, string) {
	same, sameFail, toolFail := 0, 0, 0
	countingSame, countingSameFail, countingTool := true, true, true
	for i := len(b.hist) - 1; i >= 0; i-- {
		r := b.hist[i]
		isSame := r.tool == tool && r.args == hash
		if countingSame {
			if isSame {
				same++
			} else {
				countingSame = false
			}
		}
		if countingSameFail {
			if isSame && !r.ok {
				sameFail++
			} else {
				countingSameFail = false
			}
		}
		if countingTool {
			if r.tool == tool && !r.ok {
				toolFail++
			} else {
				countingTool = false
			}
		}
		if !countingSame && !countingSameFail && !countingTool {
			break
		}
	}
	switch {
	case same > SameCallLimit:
		return halt, fmt.Sprintf("%s was called with the same arguments %d times in a row, again after being told to stop.", tool, same+1)
	case same >= SameCallLimit:
		return block, fmt.Sprintf("%s was called with the same arguments %d times in a row. It was not run again. Stop calling it: answer the user with what you have, or change your approach.", tool, same)
	case sameFail >= sameCallFailLimit:
		return block, fmt.Sprintf("%s failed %d times in a row with these arguments. It was not run again: fix the arguments or try another way.", tool, sameFail)
	case toolFail >= sameToolAbortLimit:
		return abort, fmt.Sprintf("%s failed %d times in a row.", tool, toolFail)
	case toolFail >= sameToolFailLimit:
		return block, fmt.Sprintf("%s failed %d times in a row. It was not run: try a different tool or approach.", tool, toolFail)
	}
	return allow, ""
}

// note adds a call to the history without the hint logic (a rolled-back
// duplicate: made, not answered).
func (b *breaker) note(tool, hash string, ok bool) {
	b.hist = append(b.hist, callRecord{tool: tool, args: hash, ok: ok})
	if len(b.hist) > breakerWindow {
		b.hist = b.hist[len(b.hist)-breakerWindow:]
	}
}

// record adds a call's outcome. It returns true once per turn when the
// same successful call has now been made repeatedSuccessesHint times in a
// row, so the caller can tell the model to stop repeating it.
func (b *breaker) record(tool, hash string, ok bool) (hint bool) {
	b.note(tool, hash, ok)
	if !ok || b.hintSent || len(b.hist) < repeatedSuccessesHint {
		return false
	}
	for _, r := range b.hist[len(b.hist)-repeatedSuccessesHint:] {
		if r.tool != tool || r.args != hash || !r.ok {
			return false
		}
	}
	b.hintSent = true
	return true
}
