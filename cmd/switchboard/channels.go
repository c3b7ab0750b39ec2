package main

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/workspace"
)

// channelDeps is what the daemon gives a built-in channel adapter besides
// its configuration section.
type channelDeps struct {
	// Conn is the daemon's NATS connection (the adapter never closes it).
	Conn *nats.Conn
	// Subjects is the bus's subject scheme (bus.subject_prefix).
	Subjects bus.Subjects
	// Workspace is the agent's workspace; adapters save shared files in
	// its inbox/<channel>/<chat>/ folders (workspace.InboxFolder), each
	// private to its chat. It may be nil.
	Workspace *workspace.Workspace
	// DataDir is data_dir, where adapters keep their state files.
	DataDir string
	// Log is the process logger.
	Log *slog.Logger
	// Status reports a component's readiness (admin.Server.SetReady); nil
	// means nobody listens.
	Status func(component string, err error)
	// Metrics counts platform sends and rate-limit waits; nil discards.
	Metrics channels.Metrics
}
