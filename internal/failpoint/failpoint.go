// Package failpoint names the places where a test build of the daemon can
// be made to crash, so that the exactly-once promise ("every accepted
// message gets exactly one final answer, across crashes") is tested at
// each of them with the real binary.
//
// A call site is one line, failpoint.Hit(failpoint.AfterCommit). In a
// normal build (no build tag) Hit is an empty function that the compiler
// inlines away: a release binary has no failpoints, reads no environment
// variable for them and does not even contain their names.
//
// Built with -tags failpoints, Hit reads the environment variable
// SWITCHBOARD_FAILPOINT once: a comma-separated list of points, each
// "name" (crash the first time the point is reached) or "name:n" (crash
// the n-th time). When the chosen hit comes, Hit writes one line
// "failpoint: SIGKILL at <name> (hit <n>)" to standard error and kills its
// own process with SIGKILL: no deferred function, no shutdown hook and no
// buffered write runs, as in a power cut or an OOM kill. An unknown name
// or a malformed count makes the first Hit exit the process with status 2
// and a message, so a typo in a test never passes silently.
//
// The points and where they are (docs/architecture.md, "Crash points"):
//
//   - [Received]: the agent runtime has taken an inbound message from the
//     bus (parsed, not yet queued).
//   - [MidStream]: the model has streamed some text of the turn.
//   - [MidTool]: a tool call has started and has not returned.
//   - [AfterCommit]: the turn and its receipt are committed to the
//     history store; the final answer is not published.
//   - [AfterPublish]: the final answer is published (the bus acknowledged
//     it); the inbound message is not acknowledged.
//   - [AfterAck]: the inbound message is acknowledged; its receipt is not
//     marked published.
//   - [ScheduleFire]: the scheduler has published a task's run; the run is
//     not recorded.
package failpoint

// The crash points.
const (
	Received     = "received"
	MidStream    = "mid-stream"
	MidTool      = "mid-tool"
	AfterCommit  = "after-commit"
	AfterPublish = "after-publish"
	AfterAck     = "after-ack"
	ScheduleFire = "schedule-fire"
)

// Names lists every crash point, in the order a turn passes them.
func Names() []string {
	return []string{Received, MidStream, MidTool, AfterCommit, AfterPublish, AfterAck, ScheduleFire}
}

// EnvVar is the environment variable a failpoints build reads.
const EnvVar = "SWITCHBOARD_FAILPOINT"
