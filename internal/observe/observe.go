// Package observe holds the read-only views of the running daemon that
// one part produces and another shows: the agent's sessions
// (agent.Manager.Sessions) for the web console's dashboard (channels/web),
// which may not import each other. Values only; no behaviour.
package observe

import "time"

// Session is one agent session as a snapshot saw it.
type Session struct {
	Key          string    `json:"key"`           // the session key, "<channel>/<chat>[/<thread>]"
	State        string    `json:"state"`         // running (a goroutine works the queue), queued (messages wait, none runs) or idle
	Queued       int       `json:"queued"`        // messages waiting in the session's queue
	LastActivity time.Time `json:"last_activity"` // when its last turn ended; the snapshot's time while running
}
