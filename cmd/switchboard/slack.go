package main

import (
	"os"
	"path/filepath"

	"github.com/switchboard-chat/switchboard/channels"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
)

// compSlack is the Slack adapter's readiness component on /readyz.
const compSlack = "slack"

// newSlack builds the Slack channel from channels.slack. It returns nil
// and no error when the section is absent or sets no token (the channel
// is off). The adapter keeps its state in data_dir/slack.db, saves shared
// files in the workspace's inbox/slack/<chat>/, and reports its health as the "slack"
// component through d.Status. It does no I/O; the caller runs it.
func newSlack(cfg Config, d channelDeps) (channels.Channel, error) {
	sc := cfg.Channels.Slack
	if sc == nil || !sc.Enabled() {
		return nil, nil
	}
	var inbox *os.Root
	if d.Workspace != nil {
		inbox = d.Workspace.Root()
	}
	var status func(error)
	if d.Status != nil {
		status = func(err error) { d.Status(compSlack, err) }
	}
	a, err := slackch.New(*sc, slackch.Options{
		Conn:          d.Conn,
		SubjectPrefix: d.Subjects.Prefix,
		MaxTextBytes:  cfg.Bus.MaxTextBytes,
		Inbox:         inbox,
		StorePath:     filepath.Join(d.DataDir, "slack.db"),
		OutRetention:  cfg.Bus.OutRetentionOrDefault(),
		Log:           d.Log,
		Status:        status,
		Metrics:       d.Metrics,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}
