package access

import (
	"bytes"
	"errors"
	"flag"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestStore(t *testing.T, cfg Config) (*Store, *clock, string) {
	t.Helper()
	c := &clock{t: time.Now().Truncate(time.Second)} // the verb runs on the real clock
	dir := t.TempDir()
	return New(cfg, dir, Options{Now: c.now}), c, dir
}

var codeRe = regexp.MustCompile(`pairing code is ([A-Z0-9]+) `)

// codeOf returns the code of a pairing reply.
func codeOf(t *testing.T, d Decision) string {
	t.Helper()
	m := codeRe.FindStringSubmatch(d.Reply)
	if !d.Pairing || d.Admit || m == nil {
		t.Fatalf("want a pairing reply with a code, got %+v", d)
	}
	return m[1]
}

func TestPairingCodeApproveNextMessageAdmitted(t *testing.T) {
	s, _, _ := newTestStore(t, Config{})
	d := s.Check("telegram", "42", "Ann", true)
	code := codeOf(t, d)
	if len(code) != CodeLen || strings.Trim(code, Alphabet) != "" {
		t.Fatalf("code %q: want %d characters of %s", code, CodeLen, Alphabet)
	}
	if strings.Count(d.Reply, "\n") > 3 || len(d.Reply) > 300 {
		t.Fatalf("the pairing reply is not short: %q", d.Reply)
	}
	// The same user again: no second message, no new code.
	if d := s.Check("telegram", "42", "Ann", true); d.Admit || !d.Pairing || d.Reply != "" {
		t.Fatalf("second message before approval: %+v, want silence", d)
	}
	who, err := s.Approve(strings.ToLower(code[:4])+"-"+code[4:], "test")
	if err != nil || who != "telegram:42" {
		t.Fatalf("Approve = %q, %v", who, err)
	}
	if d := s.Check("telegram", "42", "Ann", true); !d.Admit {
		t.Fatalf("after approval: %+v, want admitted", d)
	}
	// Approved users are admitted in groups too; unknown ones are left to
	// the adapter's group rules.
	if d := s.Check("telegram", "42", "Ann", false); !d.Admit {
		t.Fatalf("approved user in a group: %+v", d)
	}
	if d := s.Check("telegram", "43", "Bob", false); d != (Decision{}) {
		t.Fatalf("unknown user in a group: %+v, want the adapter's own refusal", d)
	}
	if _, err := s.Approve(code, "test"); !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("approving a used code: %v, want ErrCodeUsed", err)
	}
}

func TestPairingWrongAndExpiredCode(t *testing.T) {
	s, clk, _ := newTestStore(t, Config{})
	code := codeOf(t, s.Check("slack", "U1", "", true))
	for _, bad := range []string{"", "ABC", "ABCDEFG0", "IIIIIIII"} {
		if _, err := s.Approve(bad, "test"); !errors.Is(err, errMalformedKey) {
			t.Errorf("Approve(%q) = %v, want the malformed-code error", bad, err)
		}
	}
	wrong := "AAAAAAAA"
	if wrong == code {
		wrong = "BBBBBBBB"
	}
	if _, err := s.Approve(wrong, "test"); !errors.Is(err, ErrNoSuchCode) {
		t.Fatalf("Approve(wrong) = %v, want ErrNoSuchCode", err)
	}
	clk.add(CodeTTL)
	if _, err := s.Approve(code, "test"); !errors.Is(err, ErrCodeExpired) {
		t.Fatalf("Approve(expired) = %v, want ErrCodeExpired", err)
	}
	if d := s.Check("slack", "U1", "", true); d.Admit {
		t.Fatalf("a refused code admitted the user: %+v", d)
	}
}

func TestPairingRateLimits(t *testing.T) {
	s, clk, _ := newTestStore(t, Config{})
	first := codeOf(t, s.Check("telegram", "7", "", true))
	for range 5 {
		if d := s.Check("telegram", "7", "", true); d.Reply != "" || d.Admit {
			t.Fatalf("spam within %s: %+v, want silence", UserEvery, d)
		}
	}
	clk.add(UserEvery)
	second := codeOf(t, s.Check("telegram", "7", "", true))
	if second == first {
		t.Fatal("the new code repeats the old one")
	}
	if _, err := s.Approve(first, "test"); !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("the replaced code: %v, want refused", err)
	}
	// Globally at most MaxPending codes wait at once.
	for i := range MaxPending - 1 {
		codeOf(t, s.Check("telegram", "u"+string(rune('a'+i)), "", true))
	}
	d := s.Check("telegram", "late", "", true)
	if d.Admit || !strings.Contains(d.Reply, "too many people") {
		t.Fatalf("over MaxPending: %+v, want the busy note", d)
	}
	if d := s.Check("telegram", "late", "", true); d.Reply != "" {
		t.Fatalf("busy note repeated: %+v", d)
	}
	clk.add(CodeTTL) // all expire
	codeOf(t, s.Check("telegram", "late", "", true))
}

func TestPairingNeverReissuesACode(t *testing.T) {
	s, _, _ := newTestStore(t, Config{})
	seq := []string{"AAAA2222", "AAAA2222", "AAAA2222", "BBBB3333"}
	s.gen = func() string { c := seq[0]; seq = seq[1:]; return c }
	if c := codeOf(t, s.Check("telegram", "1", "", true)); c != "AAAA2222" {
		t.Fatal(c)
	}
	if _, err := s.Approve("AAAA2222", "test"); err != nil {
		t.Fatal(err)
	}
	if c := codeOf(t, s.Check("telegram", "2", "", true)); c != "BBBB3333" {
		t.Fatalf("second user got %s: an issued code was handed out again", c)
	}
}

func TestPoliciesAndOwners(t *testing.T) {
	s, _, _ := newTestStore(t, Config{DMPolicy: map[string]Policy{"telegram": Allowlist, "slack": Open}, Owners: []string{"telegram:1"}})
	if d := s.Check("telegram", "5", "", true); d != (Decision{}) {
		t.Fatalf("allowlist: %+v, want the adapter's refusal (no code)", d)
	}
	if d := s.Check("slack", "U5", "", true); !d.Admit {
		t.Fatalf("open: %+v", d)
	}
	if d := s.Check("telegram", "1", "", true); !d.Admit || !s.Owner("telegram", "1") || s.Owner("slack", "1") {
		t.Fatalf("owner: %+v", d)
	}
	def := Config{}
	if def.Policy("telegram") != Pairing || def.Policy("slack") != Pairing || def.Policy("console") != Open || def.Policy("wechat") != Open {
		t.Fatal("default policies")
	}
}

func TestRevokeBackToPairingAndList(t *testing.T) {
	s, _, _ := newTestStore(t, Config{})
	code := codeOf(t, s.Check("telegram", "42", "Ann", true))
	codeOf(t, s.Check("slack", "U9", "Bo", true))
	if _, err := s.Approve(code, "telegram:1"); err != nil {
		t.Fatal(err)
	}
	pending, approved, err := s.List()
	if err != nil || len(pending) != 1 || pending[0].Who != "slack:U9" || len(approved) != 1 || approved[0].Who != "telegram:42" || approved[0].By != "telegram:1" {
		t.Fatalf("List = %+v, %+v, %v", pending, approved, err)
	}
	if err := s.Revoke("telegram:42"); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke("telegram:42"); !errors.Is(err, ErrNotApproved) {
		t.Fatalf("revoking twice: %v", err)
	}
	if err := s.Revoke("nonsense"); err == nil {
		t.Fatal("revoke of a malformed user accepted")
	}
	codeOf(t, s.Check("telegram", "42", "Ann", true)) // back to pairing
}

func TestValidate(t *testing.T) {
	err := Config{DMPolicy: map[string]Policy{"telegram": "closed", "wechat": Pairing, "console": Open}, Owners: []string{"telegram:1", "nobody"}}.Validate()
	for _, want := range []string{`access.dm_policy.telegram: must be pairing, allowlist or open, got "closed"`,
		"access.dm_policy.wechat: only slack and telegram have a pairing gate", `access.owners[1]: want <channel>:<user_id>`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestVerb drives RunVerb the way the command line does, flags before
// and after the argument, with the store written by another Store (the
// daemon) in the same data_dir.
func TestVerb(t *testing.T) {
	daemon, _, dir := newTestStore(t, Config{})
	code := codeOf(t, daemon.Check("telegram", "42", "Ann", true))
	cfgFlag := func(fs *flag.FlagSet) *string { return fs.String("config", "", "configuration file") }
	load := func(path string) (Site, error) {
		if path != "my.yaml" {
			t.Errorf("config path %q", path)
		}
		return Site{DataDir: dir, Store: "bolt"}, nil
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := RunVerb(t.Context(), args, &out, &errOut, cfgFlag, load)
		return out.String() + errOut.String(), err
	}
	if out, err := run("list", "--config", "my.yaml"); err != nil || !strings.Contains(out, "telegram:42") || !strings.Contains(out, "Pending (1") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := run("approve", code, "--config", "my.yaml"); err != nil || !strings.Contains(out, "Approved telegram:42") {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if !daemon.Check("telegram", "42", "Ann", true).Admit {
		t.Fatal("the daemon's store does not see the approval")
	}
	if _, err := run("--config", "my.yaml", "approve", code); err == nil {
		t.Fatal("unknown subcommand position accepted")
	}
	if _, err := run("approve", "--config", "my.yaml", code); !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("approve again: %v", err)
	}
	if _, err := run("revoke", "--config=my.yaml", "telegram:42"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("approve", "--config", "my.yaml"); err == nil || !strings.Contains(err.Error(), "want a pairing code") {
		t.Fatalf("approve without code: %v", err)
	}
}

// TestSetConfigAppliesAtOnce: a configuration reload's policies and owners
// decide the next message.
func TestSetConfigAppliesAtOnce(t *testing.T) {
	s, _, _ := newTestStore(t, Config{DMPolicy: map[string]Policy{"telegram": Allowlist}})
	if d := s.Check("telegram", "5", "", true); d.Admit || s.Owner("telegram", "5") {
		t.Fatalf("before: %+v", d)
	}
	if lines := s.SetConfig(Config{DMPolicy: map[string]Policy{"telegram": Open}, Owners: []string{"telegram:5"}}); len(lines) != 1 {
		t.Fatalf("changes %q", lines)
	}
	if d := s.Check("telegram", "5", "", true); !d.Admit || !s.Owner("telegram", "5") {
		t.Fatalf("after the reload: %+v, owner %t", d, s.Owner("telegram", "5"))
	}
	if lines := s.SetConfig(Config{DMPolicy: map[string]Policy{"telegram": Open}, Owners: []string{"telegram:5"}}); len(lines) != 0 {
		t.Errorf("an unchanged section reported %q", lines)
	}
}

// TestAllowUsersFollowReload: the channels' allow_users lists travel in
// the configuration the gate holds; a reload that changes one reports it
// applied and the gate answers the new list at once.
func TestAllowUsersFollowReload(t *testing.T) {
	type tg struct {
		Token      string   `yaml:"token"`
		AllowUsers []string `yaml:"allow_users"`
	}
	type ids []string
	type sl struct{ AllowUsers ids }
	type web struct{ AllowUsers []string }
	type channels struct {
		Telegram *tg  `yaml:"telegram"`
		Slack    *sl  `yaml:"slack"`
		Web      *web `yaml:"web"`
	}
	start := Config{}.WithChannels(channels{Telegram: &tg{AllowUsers: []string{"1"}}, Web: &web{AllowUsers: []string{"ann"}}})
	if l, ok := start.AllowUsers["telegram"]; !ok || strings.Join(l, ",") != "1" {
		t.Fatalf("telegram list %q %t", l, ok)
	}
	if l, ok := start.AllowUsers["slack"]; ok {
		t.Fatalf("slack (section absent) list %q carried: the adapter does not run", l)
	}
	if l := start.AllowUsers["web"]; strings.Join(l, ",") != "ann" {
		t.Fatalf("web list %q", l)
	}
	other := struct {
		OpenAI *web `yaml:"openai"`
	}{&web{AllowUsers: []string{"x"}}}
	if _, ok := (Config{}).WithChannels(other).AllowUsers["openai"]; ok {
		t.Fatal("a channel that does not read its list from the gate must not be carried (nothing would apply it)")
	}
	s := New(start, t.TempDir(), Options{})
	if l, ok := s.AllowUsers("telegram"); !ok || strings.Join(l, ",") != "1" {
		t.Fatalf("AllowUsers = %q %t", l, ok)
	}
	if lines := s.SetConfig(Config{}.WithChannels(&channels{Telegram: &tg{Token: "x", AllowUsers: []string{"1"}}, Web: &web{AllowUsers: []string{"ann"}}})); len(lines) != 0 {
		t.Fatalf("unchanged lists reported: %q", lines)
	}
	lines := s.SetConfig(Config{}.WithChannels(&channels{Telegram: &tg{AllowUsers: []string{"2"}}, Slack: &sl{AllowUsers: ids{"U1"}}, Web: &web{AllowUsers: []string{"ann"}}}))
	if strings.Join(lines, "|") != "channels.telegram.allow_users: applied (in force from the next message)" {
		t.Fatalf("changes %q", lines)
	}
	if l, _ := s.AllowUsers("slack"); strings.Join(l, ",") != "U1" { // not reported: absent at start, not running
		t.Fatalf("slack after the reload: %q", l)
	}
	if strings.Join(ReloadKeys(), ",") != "channels.slack.allow_users,channels.telegram.allow_users,channels.web.allow_users" {
		t.Fatalf("ReloadKeys = %q", ReloadKeys())
	}
	lines = s.SetConfig(Config{}.WithChannels(&channels{Telegram: &tg{AllowUsers: []string{"2"}}, Slack: &sl{AllowUsers: ids{"U1", "U2"}}, Web: &web{AllowUsers: []string{"ann"}}}))
	if strings.Join(lines, "|") != "channels.slack.allow_users: applied (in force from the next message)" {
		t.Fatalf("changes %q", lines)
	}
	if l, _ := s.AllowUsers("slack"); strings.Join(l, ",") != "U1,U2" {
		t.Fatalf("slack after the reload: %q", l)
	}
}

// TestOwnersOnAuthenticatedChannels: an owner approves pairing codes and
// changes the shared prompt files, so access.owners may name only users
// of the built-in channels, whose ids the platform authenticates: an
// entry on a bridge's channel (the bridge chooses its user ids) or on no
// built-in channel is a configuration error naming the entry. The
// console's users are owners.
func TestOwnersOnAuthenticatedChannels(t *testing.T) {
	bridges := map[string][]string{"wx": {"wechat", "line"}}
	c := Config{Owners: []string{"telegram:1", "wechat:boss", "slack:U1", "myapp:7", "console:op", "web:ann", "openai:svc"}}.WithBridges(bridges)
	err := c.Validate()
	for _, want := range []string{
		"access.owners[1]: wechat:boss is on channel wechat of the bridge bus.bridges.wx, which chooses its users' ids itself",
		"access.owners[3]: myapp:7 is not on a built-in channel (console, openai, slack, telegram, web)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
	for _, ok := range []string{"owners[0]", "owners[2]", "owners[4]", "owners[5]", "owners[6]"} {
		if err != nil && strings.Contains(err.Error(), ok) {
			t.Errorf("Validate refused a built-in channel's owner: %v", err)
		}
	}
	if !c.Owner("console", "op") || !c.Owner("console", "anyone") || c.Owner("console", "") || c.Owner("wechat", "x") || !c.Owner("slack", "U1") {
		t.Error("Owner: the console's users are owners, a listed user is, nobody else")
	}
}
