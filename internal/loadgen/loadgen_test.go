package loadgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds the wait for a final reply of the fake daemon.
const testTimeout = 20 * time.Second

var update = flag.Bool("update", false, "rewrite the golden files")

// fakeDaemon stores inbound messages in a stream, as the daemon's bus
// does, and answers each with a typing envelope and a final reply, except
// in the chats of silent. It returns a client connection and the subjects.
func fakeDaemon(t *testing.T, silent ...string) (*nats.Conn, bus.Subjects) {
	t.Helper()
	s := bustest.StartServer(t)
	nc := bustest.Connect(t, s)
	subj := bus.Subjects{Prefix: "chat"}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "IN", Subjects: []string{subj.InAll()}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	daemon := bustest.Connect(t, s)
	sub, err := daemon.Subscribe(subj.InAll(), func(m *nats.Msg) {
		var in bus.Inbound
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Errorf("inbound %s: %v", m.Data, err)
			return
		}
		for _, c := range silent {
			if in.ChatID == c {
				return
			}
		}
		out := subj.Out(in.Channel, in.ChatID)
		for _, o := range []bus.Outbound{
			{V: 1, ID: in.ID + ".1", Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID, Kind: "typing", Seq: 1},
			{V: 1, ID: in.ID + ".2", Channel: in.Channel, ChatID: in.ChatID, InReplyTo: in.ID, Kind: "reply", Text: "echo: " + in.Text, Seq: 2, Final: true},
		} {
			data, _ := json.Marshal(o)
			if err := daemon.Publish(out, data); err != nil {
				t.Errorf("publish %s: %v", out, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := daemon.Flush(); err != nil { // the fake daemon listens before the first message
		t.Fatal(err)
	}
	return nc, subj
}

func TestDriveClosedLoop(t *testing.T) {
	nc, subj := fakeDaemon(t)
	r, err := Drive(t.Context(), nc, subj, Options{Chats: 3, Messages: 4, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if r.Turns != 12 || r.Chats != 3 || r.Messages != 4 || r.Rate != 0 {
		t.Fatalf("result %+v: want 12 turns of 3 chats × 4 messages, closed loop", r)
	}
	if r.TurnsPerSecond <= 0 || r.P50Ms > r.P90Ms || r.P90Ms > r.P99Ms || r.P99Ms > r.MaxMs || r.MaxMs <= 0 {
		t.Fatalf("figures out of order: %+v", r)
	}
	if r.AllocsPerTurn <= 0 || r.BytesPerTurn <= 0 || r.RSSBytes <= 0 {
		t.Fatalf("no allocation or memory figures: %+v", r)
	}
}

func TestDriveTurnsSpreadOverChats(t *testing.T) {
	nc, subj := fakeDaemon(t)
	r, err := Drive(t.Context(), nc, subj, Options{Chats: 4, Turns: 7, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if r.Turns != 7 || r.Chats != 4 || r.Messages != 0 {
		t.Fatalf("result %+v: want 7 turns over 4 chats", r)
	}
	if got := (Options{Chats: 1000, Turns: 3}).plan(); len(got) != 3 {
		t.Fatalf("1000 chats for 3 turns: plan %v, want 3 chats of one message", got)
	}
}

func TestDriveOpenLoop(t *testing.T) {
	nc, subj := fakeDaemon(t)
	r, err := Drive(t.Context(), nc, subj, Options{Chats: 2, Messages: 5, Rate: 500, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if r.Turns != 10 || r.Rate != 500 {
		t.Fatalf("result %+v: want 10 turns at 500/s", r)
	}
}

// A message without a final reply ends the run with an error naming its
// chat, in both loops.
func TestDriveNamesTheChatWithoutAnswer(t *testing.T) {
	for _, rate := range []float64{0, 1000} {
		nc, subj := fakeDaemon(t, "c1")
		_, err := Drive(t.Context(), nc, subj, Options{Chats: 3, Messages: 2, Rate: rate, Timeout: 300 * time.Millisecond})
		if err == nil {
			t.Fatalf("rate %g: no error although chat c1 is never answered", rate)
		}
		want := regexp.MustCompile(`chat c1\b.*no final reply|no final reply.*chat c1 \(message c1-0`)
		if !want.MatchString(err.Error()) {
			t.Fatalf("rate %g: error %q does not name chat c1", rate, err)
		}
		if strings.Contains(err.Error(), "c0") || strings.Contains(err.Error(), "c2") {
			t.Fatalf("rate %g: error %q names an answered chat", rate, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		flag string
	}{
		{Options{Chats: 0, Messages: 1}, "--chats"},
		{Options{Chats: 1, Messages: 0}, "--messages"},
		{Options{Chats: 1, Messages: 1, Rate: -1}, "--rate"},
		{Options{Chats: 1, Messages: 1, Timeout: -time.Second}, "--timeout"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag+": ") {
			t.Errorf("%+v: error %v, want one about %s", tc.o, err, tc.flag)
		}
	}
	if err := (Options{Chats: 1, Messages: 1}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func sampleResult() Result {
	return Result{Chats: 1000, Messages: 5, Tools: "all", Turns: 5000, Seconds: 6.219, TurnsPerSecond: 804,
		P50Ms: 1178, P90Ms: 1402.5, P99Ms: 1555, MaxMs: 1601.25, RSSBeforeBytes: 31 << 20, RSSBytes: 97 << 20,
		BytesPerTurn: 304859, AllocsPerTurn: 1726, GoVersion: "go1.26.8", GOMAXPROCS: 2}
}

// The printed report, alone and compared with a saved result (golden
// files; go test ./internal/loadgen -update rewrites them).
func TestPrintGolden(t *testing.T) {
	base := sampleResult()
	now := base
	now.TurnsPerSecond, now.P50Ms, now.AllocsPerTurn, now.Rate, now.Tools = 1608, 589, 863, 900, "files"
	now.MeanMs, now.TurnMs, now.ModelMs, now.CommitMs = 612.5, 2.25, 0.75, 0.5
	for _, tc := range []struct {
		name string
		base *Result
	}{{"report.golden", nil}, {"compare.golden", &base}} {
		var buf bytes.Buffer
		if err := Print(&buf, now, tc.base, "before.json"); err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", tc.name)
		if *update {
			if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, buf.String(), want)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	want := sampleResult()
	if err := WriteResult(file, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResult(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("read %+v, wrote %+v", got, want)
	}
}

func TestReadResultRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"notjson.json": "turns/s 800\n",
		"other.json":   `{"name":"x","turns":3,"turns_per_second":1}`,
		"empty.json":   `{"chats":1}`,
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadResult(file)
		if err == nil || !strings.Contains(err.Error(), file+" is not a result of switchboard bench --json") {
			t.Errorf("%s: error %v, want one naming the file", name, err)
		}
	}
	if _, err := ReadResult(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: error %v", err)
	}
}
