package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
	"github.com/switchboard-chat/switchboard/memory/memcfg"
)

// TestChannelRunsOnceAcrossInstances (issue 17, item 4): two instances on
// memory.store jetstream share one NATS, both with the OpenAI API
// configured (each its own listen address). Only the lease holder serves;
// the other is ready and stands by; stopping the holder hands the channel
// over, and the new holder answers.
func TestChannelRunsOnceAcrossInstances(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	nats := newNATSProcess(t)
	instance := func() (*externalDaemon, string) {
		cfg := externalConfig(t, nats.url(), model.URL())
		cfg.Memory.Store = memcfg.StoreJetStream
		oc := openaich.DefaultConfig()
		oc.Listen = freePort(t)
		oc.Keys = []openaich.Key{{Key: openAIKey, User: "ann"}}
		cfg.Channels.OpenAI = &oc
		return startExternalDaemon(t, cfg), "http://" + oc.Listen + "/v1"
	}
	serving := func(base string) bool {
		resp, err := http.Get(base + "/models")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	d1, base1 := instance()
	polltest.Until(t, wait, 10*time.Millisecond, func() bool { return serving(base1) },
		func() string { return "the first instance never served the OpenAI API" })
	d2, base2 := instance()
	// Ready means every channel reported: the standby one too.
	d2.waitReadyz(t, http.StatusOK, func(string) bool { return true })
	if serving(base2) {
		t.Fatal("the second instance serves the OpenAI API while the first holds its lease")
	}
	if got := ask(t, goClient(base1, nil), "to the first"); !strings.Contains(got, "to the first") {
		t.Fatalf("first instance answered %q", got)
	}
	d1.stop()
	polltest.Until(t, wait, 10*time.Millisecond, func() bool { return serving(base2) },
		func() string { return fmt.Sprintf("the second instance never took the OpenAI API over (%s)", base2) })
	if got := ask(t, goClient(base2, nil), "to the second"); !strings.Contains(got, "to the second") {
		t.Fatalf("second instance answered %q", got)
	}
}
