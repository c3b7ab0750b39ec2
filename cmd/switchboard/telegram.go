package main

import (
	"os"
	"path/filepath"

	"github.com/switchboard-chat/switchboard/channels"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	"github.com/switchboard-chat/switchboard/llm"
)

// compTelegram is the Telegram adapter's readiness component on /readyz.
const compTelegram = "telegram"

// newTelegram builds the Telegram channel from channels.telegram. It
// returns nil and no error when the section is absent, or sets no token
// (the channel is off; that is logged once, since the shipped config.yaml
// carries the section with ${TELEGRAM_BOT_TOKEN}). The adapter keeps its
// getUpdates offset in data_dir/telegram.db, saves received files in the
// workspace's inbox/telegram/, transcribes voice notes when
// llm.transcription_model is set, and reports its health as the
// "telegram" component through d.Status. It does no I/O; the caller runs
// it.
func newTelegram(cfg Config, d channelDeps) (channels.Channel, error) {
	tc := cfg.Channels.Telegram
	if tc == nil {
		return nil, nil
	}
	if !tc.Enabled() {
		if d.Log != nil {
			d.Log.Info("Telegram channel is off: channels.telegram.token is empty " +
				"(set TELEGRAM_BOT_TOKEN to turn it on; see docs/telegram.md)")
		}
		return nil, nil
	}
	var files *os.Root
	if d.Workspace != nil {
		files = d.Workspace.Root()
	}
	var status func(error)
	if d.Status != nil {
		status = func(err error) { d.Status(compTelegram, err) }
	}
	deps := telegram.Deps{
		Conn:         d.Conn,
		Subjects:     d.Subjects,
		MaxTextBytes: cfg.Bus.MaxTextBytes,
		StatePath:    filepath.Join(d.DataDir, "telegram.db"),
		OutRetention: cfg.Bus.OutRetentionOrDefault(),
		Files:        files,
		Log:          d.Log,
		Status:       status,
		Metrics:      d.Metrics,
	}
	if cfg.LLM.TranscriptionModel != "" {
		tr, err := llm.NewTranscriber(cfg.LLM, nil)
		if err != nil {
			return nil, err
		}
		deps.Transcriber = tr
	}
	a, err := telegram.New(*tc, deps)
	if err != nil {
		return nil, err
	}
	return a, nil
}
