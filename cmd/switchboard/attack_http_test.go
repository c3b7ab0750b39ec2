package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	goopenai "github.com/sashabaranov/go-openai"

	openaich "github.com/switchboard-chat/switchboard/channels/openai"
	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/httpserve"
	"github.com/switchboard-chat/switchboard/internal/httpserve/httpservetest"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// The attack's bounds: each listener keeps 40 connections, 10 per
// address; the idle ones close after half a second, the silent ones only
// after read_header_timeout (long, so that the attack holds its places).
const (
	attackCap   = 40
	attackPerIP = 10
)

// clientFrom is an HTTP client whose connections come from the loopback
// address from, one per request (none left idle).
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return &http.Client{Timeout: wait, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// waitMetric waits until the daemon's /metrics sample prefix has value
// want.
func waitMetric(t *testing.T, d *daemon, prefix string, want float64) {
	t.Helper()
	var got float64
	polltest.Until(t, wait, 10*time.Millisecond, func() bool {
		got = metricValue(scrape(t, d), prefix)
		return got == want
	}, func() string { return fmt.Sprintf("%s = %v, want %v", prefix, got, want) })
}

// readyz returns the admin server's /readyz status and body.
func readyz(t *testing.T, d *daemon) (int, string) {
	t.Helper()
	resp, err := clientFrom("127.0.0.1").Get("http://" + d.s.Admin.Addr() + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// chatAnswered sends a console message through the bus as the operator
// and waits for its final answer.
func chatAnswered(t *testing.T, d *daemon, id string) {
	t.Helper()
	out := d.collectOut(t, "legit-"+id)
	d.send(t, "legit-"+id, id, "still there?")
	out.WaitOutbound(t, wait, finalFor(id))
}

// TestAttackIdleConnectionsBounded: unauthenticated idle TCP connections
// to the OpenAI API and the web console (cap+100 in all, from one address
// and then from many) are refused past each listener's share per address
// and past its cap, with a 503 saying why; kept-alive ones are closed
// after the idle timeout. Meanwhile the admin /readyz, the bus (a chat
// message from the operator is answered), the other listener and a
// client with a valid API key from another address are all served, and
// the process's open descriptors and each listener's connections are
// metrics.
func TestAttackIdleConnectionsBounded(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	cfg.HTTP = httpserve.DefaultConfig()
	cfg.HTTP.MaxConns, cfg.HTTP.MaxConnsPerIP = attackCap, attackPerIP
	cfg.HTTP.ReadHeaderTimeout, cfg.HTTP.ReadTimeout, cfg.HTTP.IdleTimeout = time.Minute, time.Minute, 500*time.Millisecond
	oc := openaich.DefaultConfig()
	oc.Listen, oc.Keys = freeAddr(t), []openaich.Key{{Key: openAIKey, User: "ann"}}
	wc := webch.DefaultConfig()
	wc.Listen, wc.AllowUsers = freeAddr(t), webch.UserList{"ann"}
	cfg.Channels.OpenAI, cfg.Channels.Web = &oc, &wc
	d := startDaemon(t, cfg)

	legitAPI := func(from string) {
		t.Helper()
		c := goopenai.DefaultConfig(openAIKey)
		c.BaseURL, c.HTTPClient = "http://"+oc.Listen+"/v1", clientFrom(from)
		stream, err := goopenai.NewClientWithConfig(c).CreateChatCompletionStream(t.Context(), goopenai.ChatCompletionRequest{Model: "switchboard",
			Stream: true, Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "legit from " + from}}})
		if err != nil {
			t.Fatalf("a client with a valid key from %s: %v", from, err)
		}
		defer stream.Close()
		var text strings.Builder
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a streamed answer to %s: %v", from, err)
			}
			text.WriteString(resp.Choices[0].Delta.Content)
		}
		if !strings.Contains(text.String(), "legit from "+from) {
			t.Fatalf("a streamed answer to %s: %q", from, text.String())
		}
	}
	legitWeb := func(from string) {
		t.Helper()
		resp, err := clientFrom(from).Get("http://" + wc.Listen + "/login")
		if err != nil {
			t.Fatalf("the web console's login page from %s: %v", from, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the web console's login page from %s: %d", from, resp.StatusCode)
		}
	}
	for _, addr := range []string{oc.Listen, wc.Listen} {
		polltest.Until(t, wait, 10*time.Millisecond, func() bool {
			resp, err := clientFrom("127.0.0.1").Get("http://" + addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		}, func() string { return "the channel never listened on " + addr })
	}
	legitAPI("127.0.0.200")
	legitWeb("127.0.0.200")

	for _, l := range []struct {
		name, addr  string
		legit, peer func(from string) // the listener's legitimate client, the other listener's
	}{{openaich.Name, oc.Listen, legitAPI, legitWeb}, {webch.Name, wc.Listen, legitWeb, legitAPI}} {
		t.Run(l.name, func(t *testing.T) {
			open := fmt.Sprintf(`switchboard_http_open_connections{listener=%q}`, l.name)
			full := fmt.Sprintf(`switchboard_http_refused_connections_total{listener=%q,reason="max_conns"}`, l.name)
			perIP := fmt.Sprintf(`switchboard_http_refused_connections_total{listener=%q,reason="max_conns_per_ip"}`, l.name)
			waitMetric(t, d, open, 0) // the legitimate clients' connections closed

			// One address: its share, then refusals.
			held := httpservetest.Dial(t, l.addr, "127.0.0.1", attackPerIP+20)
			httpservetest.ExpectRefused(t, held, 20, "too many open connections from your address")
			waitMetric(t, d, perIP, 20)
			waitMetric(t, d, open, attackPerIP)
			l.legit("127.0.0.201") // another address still gets in

			// Many addresses, each within its share: the cap, then refusals.
			for i := 2; i <= 14; i++ {
				held = append(held, httpservetest.Dial(t, l.addr, fmt.Sprintf("127.0.0.%d", i), attackPerIP)...)
			}
			httpservetest.ExpectRefused(t, held[attackPerIP+20:], 100, "this server has too many open connections")
			waitMetric(t, d, full, 100)
			waitMetric(t, d, open, attackCap)
			if max := metricValue(scrape(t, d), fmt.Sprintf(`switchboard_http_max_connections{listener=%q}`, l.name)); max != attackCap {
				t.Errorf("switchboard_http_max_connections of %s = %v, want %d", l.name, max, attackCap)
			}
			body := scrape(t, d)
			if fds, limit := metricValue(body, "process_open_fds"), metricValue(body, "process_max_fds"); fds <= 0 || fds >= limit {
				t.Errorf("process_open_fds %v of process_max_fds %v", fds, limit)
			}
			// The rest of the daemon is served while the listener is full.
			if code, body := readyz(t, d); code != http.StatusOK {
				t.Errorf("/readyz during the attack = %d %q", code, body)
			}
			chatAnswered(t, d, l.name+"-during")
			l.peer("127.0.0.202")

			for _, c := range held {
				_ = c.Close()
			}
			waitMetric(t, d, open, 0)
			l.legit("127.0.0.203")
			chatAnswered(t, d, l.name+"-after")

			// Kept-alive connections that go idle are closed after
			// idle_timeout, giving their places back.
			kept := httpservetest.Dial(t, l.addr, "127.0.0.1", 5)
			for _, c := range kept {
				_ = c.SetDeadline(time.Now().Add(wait))
				fmt.Fprintf(c, "GET /login HTTP/1.1\r\nHost: test\r\n\r\n")
			}
			waitMetric(t, d, open, 5)
			for i, c := range kept {
				b, err := io.ReadAll(c) // the response, then the server's close
				if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 ") {
					t.Fatalf("kept-alive connection %d: %q, %v: want a response, then the close", i, b, err)
				}
			}
			waitMetric(t, d, open, 0)
		})
	}
}

// TestReadyzWhileStreamCannotStore: /readyz says not ready, naming the
// stream and why, while a stream the daemon writes to cannot store — full
// (CHAT_IN at its max_bytes: every inbound message refused), or broken by
// a write error of the store (files may not grow, as on a full disk or
// with no descriptor left), which the server keeps until it restarts —
// and ready again once it stores: room made, or the daemon restarted.
func TestReadyzWhileStreamCannotStore(t *testing.T) {
	model := llmtest.NewServer(t, llmtest.WithResponder(llmtest.EchoResponder))
	cfg := testConfig(t, model.URL())
	d := startDaemon(t, cfg)
	waitReady := func(t *testing.T, d *daemon, want int, reason string) {
		t.Helper()
		var code int
		var body string
		polltest.Until(t, wait, 50*time.Millisecond, func() bool {
			code, body = readyz(t, d)
			return code == want && strings.Contains(body, reason)
		}, func() string { return fmt.Sprintf("/readyz = %d %q, want %d with %q", code, body, want, reason) })
	}
	waitReady(t, d, http.StatusOK, "ready")
	chatAnswered(t, d, "before")

	t.Run("full", func(t *testing.T) {
		js, err := jetstream.New(d.nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(t.Context(), "CHAT_IN")
		if err != nil {
			t.Fatal(err)
		}
		was := s.CachedInfo().Config
		small := was
		small.MaxBytes = 100
		if _, err := js.UpdateStream(t.Context(), small); err != nil {
			t.Fatal(err)
		}
		waitReady(t, d, http.StatusServiceUnavailable, "bus: natsbus: not ready: stream CHAT_IN cannot store new messages: it is full")
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		if _, err := js.Publish(ctx, d.subjects().In("console", "full"), []byte(strings.Repeat("x", 200))); err == nil {
			t.Fatal("the full stream stored a message")
		}
		if _, err := js.UpdateStream(t.Context(), was); err != nil {
			t.Fatal(err)
		}
		waitReady(t, d, http.StatusOK, "ready")
		chatAnswered(t, d, "room-again")
	})

	t.Run("write error", func(t *testing.T) {
		var was syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
			t.Fatal(err)
		}
		tiny := was
		tiny.Cur = 1
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &tiny); err != nil {
			t.Skip("cannot lower RLIMIT_FSIZE:", err)
		}
		restored := false
		restore := func() {
			if !restored {
				restored = true
				_ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was)
			}
		}
		defer restore()
		// A message the stream cannot write: the server records the
		// error (and answers no acknowledgement).
		js, err := jetstream.New(d.nc)
		if err != nil {
			t.Fatal(err)
		}
		var code int
		var body string
		polltest.Until(t, wait, 50*time.Millisecond, func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			_, _ = js.Publish(ctx, d.subjects().In("console", "broken"), []byte(`{}`))
			cancel()
			code, body = readyz(t, d)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "stream CHAT_IN cannot store new messages") && strings.Contains(body, "write error")
		}, func() string { return fmt.Sprintf("/readyz while CHAT_IN cannot write = %d %q", code, body) })
		restore()
		if !strings.Contains(body, "restart the daemon") {
			t.Errorf("/readyz does not say what to do: %q", body)
		}
		// The cause is gone, the stream stays broken: not ready until a
		// restart, which stores again.
		waitReady(t, d, http.StatusServiceUnavailable, "write error")
		d.stop()
		d2 := startDaemon(t, cfg)
		waitReady(t, d2, http.StatusOK, "ready")
		chatAnswered(t, d2, "restarted")
	})
}
