// Package switchboard holds the repository files the binary carries: the
// shipped config.yaml. The daemon and its verbs run on it when there is no
// configuration file (config.Load's builtin), so its ${VAR} references read
// the environment as documented (OPENAI_API_KEY, TELEGRAM_BOT_TOKEN, ...)
// and an empty environment gives exactly the built-in defaults.
package switchboard

import _ "embed"

// ShippedConfig is the content of config.yaml at the repository root.
//
//go:embed config.yaml
var ShippedConfig []byte
