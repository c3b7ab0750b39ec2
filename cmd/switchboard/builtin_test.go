package main

import (
	"slices"
	"testing"

	"github.com/switchboard-chat/switchboard/channels/console"
	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	slackch "github.com/switchboard-chat/switchboard/channels/slack"
	"github.com/switchboard-chat/switchboard/channels/telegram"
	webch "github.com/switchboard-chat/switchboard/channels/web"
)

// TestBuiltinChannelsAreTheAdapters: the one list of built-in channels
// (access.Authenticated, which no bridge may claim and on which alone
// owners may be) names exactly the channels of the daemon's adapters.
func TestBuiltinChannelsAreTheAdapters(t *testing.T) {
	adapters := []string{console.Channel, telegram.Name, slackch.ChannelName, webch.Name, openaich.Name}
	got := slices.Sorted(slices.Values(builtinChannels))
	want := slices.Sorted(slices.Values(adapters))
	if !slices.Equal(got, want) {
		t.Fatalf("built-in channels %v, the adapters' channels %v", got, want)
	}
}
