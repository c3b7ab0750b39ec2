package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	goopenai "github.com/sashabaranov/go-openai"

	webch "github.com/switchboard-chat/switchboard/channels/web"
	"github.com/switchboard-chat/switchboard/internal/polltest"
	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// What the scripted model answers in the browser test, by the user's text.
const (
	browserStream = "Streaming works: one two three four five six seven eight nine ten."
	browserXSS    = "Look: <img src=x onerror=\"alert(1);window.__pwned=1\"> and\n\n<script>window.__pwned=2;alert(2)</script>\n\n" +
		"[click me](javascript:window.__pwned=3) <a href=\"javascript:alert(4)\">raw link</a> <b onclick=\"alert(5)\">raw bold</b> " +
		"<iframe src=\"javascript:alert(6)\"></iframe>\n\nA [real link](https://example.com/docs) and **bold**.\n\n```go\nfmt.Println(\"<b>hi</b>\")\n```"
	browserLong = "Once upon a time there was a very long story that went on and on, chunk after chunk, " +
		"far longer than anyone would wait for, so that somebody pressed stop long before its end."
)

// browserModel answers the test's turns by their user text.
func browserModel(req *llmtest.Request) llmtest.Reply {
	last, _ := req.LastMessage()
	switch text := req.LastUserText(); {
	case strings.Contains(text, "hello stream"):
		return llmtest.Reply{Text: browserStream, ChunkSize: 6, ChunkDelay: 150 * time.Millisecond}
	case strings.Contains(text, "save a note"):
		if last.Role == goopenai.ChatMessageRoleTool {
			return llmtest.TextReply("Saved the note.")
		}
		return llmtest.ToolCallReply("write_file", `{"path":"web-note.txt","content":"from the browser"}`)
	case strings.Contains(text, "here is data"):
		return llmtest.TextReply("Got your file.")
	case strings.Contains(text, "show html"):
		return llmtest.TextReply(browserXSS)
	case strings.Contains(text, "a long story"):
		return llmtest.Reply{Text: browserLong, ChunkSize: 3, ChunkDelay: 200 * time.Millisecond}
	case strings.Contains(text, "first line\nsecond line"), strings.Contains(text, "pasted one\npasted two"):
		return llmtest.TextReply("Lines received.")
	}
	return llmtest.TextReply("ok")
}

// void drops an action's value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// enter presses Enter (with Shift when shift is set) the way a keyboard
// does: one keyDown carrying the text "\r", which the page may cancel,
// then keyUp. (chromedp's KeyEvent sends the text as a separate char
// event that a cancelled keydown does not stop.)
func enter(shift bool) chromedp.Action[chromedp.Void] {
	var mods int64
	if shift {
		mods = 8
	}
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Modifiers: mods, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
			if typ == input.DispatchKeyEventTypeKeyDown {
				p.Text, p.UnmodifiedText = "\r", "\r"
			}
			if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// typeAndSend types text into the message box and presses Enter.
func typeAndSend(text string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.CSS("#input"), text), enter(false)}
}

// chromium returns the browser's path, or skips (fails with
// SWITCHBOARD_REQUIRE_BROWSER=1, as in CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SWITCHBOARD_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed and SWITCHBOARD_REQUIRE_BROWSER=1 (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); set SWITCHBOARD_REQUIRE_BROWSER=1 to fail instead")
	return ""
}

// artifacts is where the test saves its screenshots: $SWITCHBOARD_ARTIFACTS
// or a temporary folder.
func artifacts(t *testing.T) string {
	dir := os.Getenv("SWITCHBOARD_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWebConsoleInBrowser drives the web console in a real headless
// Chromium against a daemon with the scripted model: log in with a pairing
// code, stream a reply, run a tool, send multi-line messages, upload a
// file, render hostile HTML without running any of it, stop a slow turn,
// and see the session and the tool call on the dashboard.
func TestWebConsoleInBrowser(t *testing.T) {
	chrome := chromium(t)
	model := llmtest.NewServer(t, llmtest.WithResponder(browserModel))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig(t, model.URL())
	cfg.Channels.Web = &webch.Config{Listen: addr, AllowUsers: webch.UserList{"ann"}, Dashboard: true, Operators: webch.UserList{"ann"}}
	startDaemon(t, cfg)
	base := "http://" + addr
	polltest.Until(t, wait, 10*time.Millisecond, func() bool {
		resp, err := http.Get(base + "/login")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, func() string { return "the web console never listened on " + addr })

	// The operator mints a code: `switchboard web pair`.
	var out bytes.Buffer
	if err := webch.Pair(&out, cfg.DataDir, cfg.Channels.Web, "", "config.yaml"); err != nil {
		t.Fatalf("web pair: %v: %s", err, out.String())
	}
	code := strings.TrimPrefix(strings.SplitN(out.String(), "\n", 2)[0], "Pairing code: ")

	shots := artifacts(t)
	t.Logf("screenshots in %s", shots)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.WindowSize(1100, 850))
	// (chromedp gives the browser a fresh --user-data-dir and removes it.)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	var listeners sync.WaitGroup
	defer func() {
		cancelCtx()
		cancelAlloc()
		listeners.Wait()
	}()
	// The first run starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 2*wait)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(what, js string) any {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 2*wait)
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	// until waits (in the page, on animation frames) for a predicate.
	until := func(what, js string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 2*wait)
		defer cancel()
		if err := chromedp.Do(sctx, void(chromedp.Poll[any](js, chromedp.WithPollingTimeout(2*wait)))); err != nil {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("messages") || document.body).outerHTML`))
			t.Fatalf("%s: %v; the messages:\n%s", what, err, html)
		}
	}
	shot := func(name string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 2*wait)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Unauthenticated: the chat redirects to the login page.
	do("open the chat", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	if loc := eval("location", "location.pathname"); loc != "/login" {
		t.Fatalf("an unauthenticated browser is on %v, want /login", loc)
	}
	var dialogMu sync.Mutex
	var dialogs []string
	listeners.Go(func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogMu.Lock()
			dialogs = append(dialogs, ev.Message)
			dialogMu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	})
	do("log in", chromedp.SendKeys(chromedp.CSS("#user"), "ann"), chromedp.SendKeys(chromedp.CSS("#code"), code),
		chromedp.Click(chromedp.CSS("#login-button")), chromedp.WaitVisible(chromedp.CSS("#composer")))
	until("the chat loaded", `document.body.dataset.ready === "1"`)

	// 1. A streamed reply appears progressively and ends as the final.
	eval("observe the stream", `window.__partials = [];
		new MutationObserver(() => {
			document.querySelectorAll(".msg.agent.pending .body").forEach((b) => {
				const t = b.textContent;
				if (t && window.__partials[window.__partials.length - 1] !== t) window.__partials.push(t);
			});
		}).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true }); true`)
	do("send", typeAndSend("hello stream")...)
	until("the final reply", fmt.Sprintf(`[...document.querySelectorAll(".msg.agent.kind-reply .body")].some((b) => b.textContent === %q)`, browserStream))
	partials, _ := eval("partials", "window.__partials").([]any)
	strict := 0
	for _, p := range partials {
		s, _ := p.(string)
		if !strings.HasPrefix(browserStream, s) {
			t.Errorf("streamed text %q is not a prefix of the final %q", s, browserStream)
		}
		if len(s) < len(browserStream) {
			strict++
		}
	}
	if strict == 0 {
		t.Fatalf("no partial text was shown before the final (saw %q)", partials)
	}

	// 2. A tool call shows live in the chat, then the final.
	do("send", typeAndSend("save a note")...)
	until("the tool call and the final", `[...document.querySelectorAll(".msg.agent")].some((m) =>
		m.querySelector(".tool .tool-name") && m.querySelector(".tool .tool-name").textContent.includes("write_file") &&
		m.querySelector(".tool .tool-args").textContent.includes("web-note.txt") &&
		m.querySelector(".tool .tool-status").textContent.includes(" ms") &&
		m.querySelector(".body").textContent === "Saved the note.")`)
	if data, err := os.ReadFile(filepath.Join(cfg.Agent.Workspace, "web-note.txt")); err != nil || string(data) != "from the browser" {
		t.Fatalf("the tool did not run: %q, %v", data, err)
	}

	// 3. Shift+Enter is a new line; a pasted block of lines is one message.
	do("type two lines", chromedp.SendKeys(chromedp.CSS("#input"), "first line"),
		enter(true), chromedp.SendKeys(chromedp.CSS("#input"), "second line"), enter(false))
	until("the two typed lines answered", `[...document.querySelectorAll(".msg.user")].some((m) => m.textContent === "first line\nsecond line") &&
		[...document.querySelectorAll(".msg.agent .body")].filter((b) => b.textContent === "Lines received.").length === 1`)
	do("paste two lines", chromedp.Focus(chromedp.CSS("#input")), chromedp.Func(func(c context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(c, input.InsertText, input.InsertTextParams{Text: "pasted one\npasted two"})
		return err
	}), enter(false))
	until("the pasted lines answered, every answer after its question", `[...document.querySelectorAll(".msg.user")].some((m) => m.textContent === "pasted one\npasted two") &&
		[...document.querySelectorAll(".msg.agent .body")].filter((b) => b.textContent === "Lines received.").length === 2 &&
		[...document.querySelectorAll(".msg.agent")].every((a) => {
			const all = [...document.querySelectorAll(".msg")];
			const q = all.findIndex((m) => m.classList.contains("user") && m.dataset.id === a.dataset.replyTo);
			return q >= 0 && q < all.indexOf(a);
		})`)

	// 4. Upload a file: it lands in the chat's inbox and the agent is told.
	csv := filepath.Join(t.TempDir(), "data.csv")
	if err := os.WriteFile(csv, []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	do("attach", chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{csv}))
	until("the file listed", `document.getElementById("files").textContent.includes("data.csv")`)
	do("send", typeAndSend("here is data")...)
	until("the upload answered", `[...document.querySelectorAll(".msg.user .files")].some((f) => f.textContent.includes("data.csv")) &&
		[...document.querySelectorAll(".msg.agent .body")].some((b) => b.textContent === "Got your file.")`)
	var sawFile bool
	for _, r := range model.Requests() {
		if u := r.LastUserText(); strings.Contains(u, "here is data") && strings.Contains(u, "saved in the workspace as inbox/web/") && strings.Contains(u, "data.csv") {
			sawFile = true
		}
	}
	if !sawFile {
		var texts []string
		for _, r := range model.Requests() {
			texts = append(texts, r.LastUserText())
		}
		t.Fatalf("the model was not told where the uploaded file is; it saw %q", texts)
	}

	// 5. Hostile HTML in a reply runs nothing and changes nothing outside
	// the message text.
	const outside = `document.head.outerHTML + "|" + document.querySelector("header").outerHTML + "|" +
		document.querySelectorAll("script").length + "|" + document.querySelectorAll("img, iframe, object, embed").length`
	before := eval("the page outside the messages", outside)
	do("send", typeAndSend("show html")...)
	until("the hostile reply", `[...document.querySelectorAll(".msg.agent .body")].some((b) => b.textContent.includes("<img src=x onerror="))`)
	shot("chat.png")
	if after := eval("the page outside the messages", outside); after != before {
		t.Errorf("the reply changed the page outside its text:\nbefore %v\nafter  %v", before, after)
	}
	if n := eval("dangerous elements", `document.querySelectorAll("#messages img, #messages script, #messages iframe, #messages [onerror], #messages [onclick], #messages a[href^='javascript'], #messages b").length`); n != 0.0 {
		t.Errorf("%v elements from the model's HTML are in the DOM", n)
	}
	do("click what looks like a link", void(chromedp.Evaluate[any](`[...document.querySelectorAll("#messages a")].forEach((a) => { if (a.textContent === "click me") a.click(); }); null`)))
	if v := eval("the payload's flag", "typeof window.__pwned"); v != "undefined" {
		t.Errorf("a payload ran: window.__pwned is %v", v)
	}
	if v := eval("the real link", `(() => { const a = [...document.querySelectorAll("#messages a")].find((a) => a.textContent === "real link"); return a ? a.href + " " + a.rel : ""; })()`); v != "https://example.com/docs noopener noreferrer nofollow" {
		t.Errorf("the https link rendered as %q", v)
	}
	if v := eval("the code block", `(() => { const c = [...document.querySelectorAll("#messages .code")].pop(); return c ? c.querySelector("code").textContent + "|" + c.querySelector("button.copy").textContent : ""; })()`); v != "fmt.Println(\"<b>hi</b>\")|Copy" {
		t.Errorf("the code block rendered as %q", v)
	}

	// 6. Stop during a slow stream.
	do("send", typeAndSend("a long story")...)
	until("the story streaming", `[...document.querySelectorAll(".msg.agent.pending .body")].some((b) => b.textContent.length > 0)`)
	do("press stop", chromedp.Click(chromedp.CSS("#stop")))
	until("the turn stopped", `document.querySelectorAll(".msg.agent.pending").length === 0 &&
		[...document.querySelectorAll(".msg.agent.kind-notice .body")].some((b) => b.textContent.includes("Stopping the running request"))`)
	if v := eval("the story", fmt.Sprintf(`[...document.querySelectorAll(".msg.agent .body")].some((b) => b.textContent === %q)`, browserLong)); v != false {
		t.Errorf("the stopped story was shown whole")
	}

	// 7. Phone width.
	do("phone width", chromedp.EmulateViewport(390, 844))
	until("the composer fits", `document.getElementById("send").getBoundingClientRect().right <= 390 && getComputedStyle(document.getElementById("convs")).display === "none"`)
	shot("chat-phone.png")
	do("desktop width", chromedp.EmulateViewport(1100, 850))

	// 8. The dashboard lists the session and the tool call's trace.
	dash, cancelDash := chromedp.NewContext(ctx)
	defer cancelDash()
	dctx, cancel := context.WithTimeout(dash, 2*wait)
	defer cancel()
	if err := chromedp.Do(dctx, chromedp.Navigate(base+"/dashboard"),
		void(chromedp.Poll[any](`document.querySelector("#sessions tbody").textContent.includes("web") &&
			document.querySelector("#sessions tbody").textContent.includes("ann:") &&
			document.querySelector("#traces tbody").textContent.includes("write_file") &&
			document.querySelector("#health").textContent.includes("Ready") &&
			document.querySelector("#config").textContent.includes("(redacted)")`, chromedp.WithPollingTimeout(2*wait)))); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	// The request the model was sent for the tool turn, redacted.
	if err := chromedp.Do(dctx, chromedp.Click(chromedp.CSS("#sessions tbody tr")),
		void(chromedp.Poll[any](`document.getElementById("requests").textContent.includes("save a note") &&
			document.getElementById("requests").textContent.includes("write_file")`, chromedp.WithPollingTimeout(2*wait)))); err != nil {
		t.Fatalf("dashboard: the model request: %v", err)
	}
	if cfgText, err := chromedp.Run(dctx, chromedp.Text(chromedp.CSS("#config"))); err != nil || strings.Contains(cfgText, "test-key") {
		t.Errorf("the dashboard's config shows the model API key (or failed: %v)", err)
	}
	png, err := chromedp.Run(dctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "dashboard.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}

	dialogMu.Lock()
	defer dialogMu.Unlock()
	if len(dialogs) > 0 {
		t.Fatalf("the page opened JavaScript dialogs: %q", dialogs)
	}
}

// TestWebPairVerb: `switchboard web pair` reads the config file, refuses
// when the console is off or the user is not allowed, and mints a code in
// data_dir.
func TestWebPairVerb(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	write := func(users string) {
		if err := os.WriteFile(cfgPath, []byte("data_dir: "+filepath.Join(dir, "data")+"\nchannels:\n  web:\n    allow_users: ["+users+"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	write("")
	if code := run(t.Context(), []string{"web", "pair", "--config", cfgPath}, nil, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "off") {
		t.Fatalf("web pair with the console off: exit %d, %s", code, errOut.String())
	}
	write("ann")
	out.Reset()
	errOut.Reset()
	if code := run(t.Context(), []string{"web", "pair", "--config", cfgPath, "--user", "eve"}, nil, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "allow_users") {
		t.Fatalf("web pair for a user not allowed: exit %d, %s", code, errOut.String())
	}
	if code := run(t.Context(), []string{"web", "pair", "--config", cfgPath, "--user", "ann"}, nil, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "Pairing code: ") {
		t.Fatalf("web pair: exit %d, %q %s", code, out.String(), errOut.String())
	}
	if ents, err := os.ReadDir(webch.PairDir(filepath.Join(dir, "data"))); err != nil || len(ents) != 1 {
		t.Fatalf("pairing codes in data_dir: %v, %v", ents, err)
	}
}
