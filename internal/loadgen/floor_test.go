package loadgen_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/switchboard-chat/switchboard/llm/llmtest"
)

// BenchmarkFloor is the floor under BenchmarkTurns (cmd/switchboard): the
// same parts a turn of the daemon goes through, with no Switchboard code
// between them. Per turn, for Chats chats in a closed loop:
//
//  1. the client publishes the message to a JetStream stream (async
//     publish with a de-duplication id, as a bridge does);
//  2. a durable pull consumer delivers it; a worker (64 of them, like
//     the daemon's turn slots) takes it;
//  3. the worker POSTs a chat-completion request of the daemon's size
//     (a 12 KB system prompt, the last turns, 11 tool schemas) to the
//     same zero-latency scripted model over HTTP and reads its SSE stream
//     to the end;
//  4. it writes the turn (two ~300-byte records) to bbolt in a batched,
//     fsynced transaction (bolt.DB.Batch: group commit);
//  5. it publishes a typing notice (core) and the final reply to a second
//     stream and waits for the PubAck;
//  6. it acknowledges the inbound message; the client receives the final
//     on a core subscription and sends the chat's next message.
//
// That is less than the daemon does (no envelope validation, prompt
// build, history load, tool registry, events, metrics, receipts), so its
// turns/s bound what any implementation on these parts reaches on this
// machine: issue 16's 5,000 turns/s target is checked against it.
//
//	go test ./internal/loadgen -run '^$' -bench Floor -benchtime 5000x
func BenchmarkFloor(b *testing.B) {
	for _, chats := range []int{1, 1000} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) { benchFloor(b, chats) })
	}
}

func benchFloor(b *testing.B, chats int) {
	ctx := b.Context()
	ns, err := server.NewServer(&server.Options{ServerName: "floor", DontListen: true, JetStream: true,
		StoreDir: b.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	ns.Start()
	b.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	daemonNC, clientNC := connect(), connect()
	js, err := jetstream.New(daemonNC)
	if err != nil {
		b.Fatal(err)
	}
	for name, subj := range map[string]string{"IN": "in.>", "OUT": "out.>"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			b.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: "agent",
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20_000, AckWait: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(b.TempDir(), "history.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	db.MaxBatchDelay = 2 * time.Millisecond // boltstore's default
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("h")); return err }); err != nil {
		b.Fatal(err)
	}

	model := llmtest.NewServer(b, llmtest.WithResponder(llmtest.EchoResponder), llmtest.WithRecordLimit(0))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	b.Cleanup(hc.CloseIdleConnections)
	body := floorRequestPrefix()

	// The daemon side: consume, hand to 64 workers.
	work := make(chan jetstream.Msg, 256)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Go(func() {
			for m := range work {
				if err := floorTurn(ctx, m, hc, model.URL(), body, db, daemonNC, js); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		})
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { work <- m }, jetstream.PullMaxMessages(256))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cc.Stop()
		<-cc.Closed()
		close(work)
		wg.Wait()
	}()

	// The client side: closed loop over chats.
	cjs, err := jetstream.New(clientNC)
	if err != nil {
		b.Fatal(err)
	}
	var sent atomic.Int64
	done := make(chan struct{})
	var received atomic.Int64
	send := func(chat int) {
		n := sent.Add(1)
		if n > int64(b.N) {
			return
		}
		subj := "in.console." + strconv.Itoa(chat)
		if _, err := cjs.PublishAsync(subj, []byte(`{"text":"message `+strconv.FormatInt(n, 10)+`"}`),
			jetstream.WithMsgID("m"+strconv.FormatInt(n, 10))); err != nil {
			failed.CompareAndSwap(nil, err)
		}
	}
	// Finals only: out.console.<chat> (the typing notice is out.console.<chat>.typing).
	sub, err := clientNC.Subscribe("out.console.*", func(m *nats.Msg) {
		if received.Add(1) == int64(b.N) {
			close(done)
			return
		}
		chat, _ := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		send(chat)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := clientNC.Flush(); err != nil {
		b.Fatal(err)
	}

	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for c := range min(chats, b.N) {
		send(c)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d finals after 5 minutes", received.Load(), b.N)
	}
	el := time.Since(t0)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "turns/s")
}

// writers counts the floor's turns writing to bbolt at the moment.
var writers atomic.Int64

// floorTurn is one turn of the floor: model round trip, durable write,
// final publish with its PubAck, inbound ack.
func floorTurn(ctx context.Context, m jetstream.Msg, hc *http.Client, url string, prefix []byte,
	db *bolt.DB, nc *nats.Conn, js jetstream.JetStream) error {
	subj := m.Subject()
	chat := subj[strings.LastIndexByte(subj, '.')+1:]
	out := "out.console." + chat
	_ = nc.Publish(out+".typing", nil) // the daemon's typing notice: core publish

	req := make([]byte, 0, len(prefix)+len(m.Data())+32)
	req = append(req, prefix...)
	req = append(req, `{"role":"user","content":`...)
	req = strconv.AppendQuote(req, string(m.Data()))
	req = append(req, "}]}"...)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(req))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer floor")
	resp, err := hc.Do(hreq)
	if err != nil {
		return err
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("data: ")) && !bytes.Equal(line, []byte("data: [DONE]")) {
			text.Write(line[6:]) // kept, not decoded: the daemon decodes each chunk
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("model: %s", resp.Status)
	}

	// Group commit as boltstore does it: a lone writer commits at once,
	// concurrent ones share a batch (MaxBatchDelay 2 ms).
	write := db.Batch
	if writers.Add(1) == 1 {
		write = db.Update
	}
	defer writers.Add(-1)
	if err := write(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte("h"))
		seq, _ := bk.NextSequence()
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], seq)
		if err := bk.Put(append([]byte(chat+"/"), k[:]...), m.Data()); err != nil {
			return err
		}
		return bk.Put(append([]byte(chat+"/a"), k[:]...), []byte(text.String()))
	}); err != nil {
		return err
	}
	if _, err := js.Publish(ctx, out, []byte(text.String())); err != nil {
		return err
	}
	return m.Ack()
}

// floorRequestPrefix is a chat-completion request body of the daemon's
// size up to the last user message: model, stream, tools, a 12 KB system
// prompt and two earlier turns.
func floorRequestPrefix() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"floor","stream":true,"stream_options":{"include_usage":true},"tools":[`)
	for i := range 11 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"function","function":{"name":"tool_%d","description":%q,"parameters":{"type":"object","properties":{"path":{"type":"string","description":"a path relative to the workspace"},"limit":{"type":"integer"}},"required":["path"]}}}`,
			i, strings.Repeat("Does one thing to files in the workspace. ", 6))
	}
	b.WriteString(`],"messages":[{"role":"system","content":`)
	b.WriteString(strconv.Quote(strings.Repeat("You are Switchboard, an assistant people reach through chat apps. ", 180)))
	b.WriteString(`},{"role":"user","content":"earlier question"},{"role":"assistant","content":"earlier answer"},`)
	return b.Bytes()
}
