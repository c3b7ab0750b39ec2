package natsbus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/bus"
	"github.com/switchboard-chat/switchboard/bus/natsbus"
)

// BenchmarkOpenClose measures embedded start-up and shutdown on an empty
// store (part of the daemon's time to ready).
func BenchmarkOpenClose(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		bb, err := natsbus.Open(b.Context(), inProcessConfig(), b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := bb.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishConsumeAck measures inbound throughput: a JetStream
// publish with a msg id, delivery to the consumer, and an ack.
func BenchmarkPublishConsumeAck(b *testing.B) {
	bb, err := natsbus.Open(b.Context(), inProcessConfig(), b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	ctx, cancel := context.WithCancel(b.Context())
	received := make(chan struct{}, 1<<16)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = bb.Consume(ctx, func(d bus.Delivery) {
			_ = d.Ack()
			received <- struct{}{}
		})
	})
	defer func() { cancel(); wg.Wait() }()

	subject := bb.Subjects().In("console", "demo")
	data := mustJSON(b, inbound("m", "What's the weather like in Paris tomorrow?"))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	i := 0
	for b.Loop() {
		i++
		if err := bb.Publish(ctx, subject, data, fmt.Sprint("console:", i)); err != nil {
			b.Fatal(err)
		}
		<-received
	}
}

// BenchmarkBridgePublishConsumeAck is BenchmarkPublishConsumeAck for a
// declared bridge over TCP: the bridge publishes in its own account, the
// daemon's ingress validates the envelope, stores it in the in stream and
// forwards the acknowledgement; the consumer receives and acks it. Compare
// with BenchmarkPublishConsumeAck/tcp for the cost of the ingress hop.
func BenchmarkBridgePublishConsumeAck(b *testing.B) {
	for _, viaBridge := range []bool{false, true} {
		name := "tcp"
		if viaBridge {
			name = "bridge"
		}
		b.Run(name, func(b *testing.B) {
			cfg := natsbus.DefaultConfig()
			cfg.Listen = "127.0.0.1:0"
			cfg.Admin = natsbus.AdminConfig{Token: "bench-admin"}
			cfg.Bridges = map[string]natsbus.BridgeConfig{"wx": {Channels: []string{"wechat"}, Token: "bench-wx", MaxMsgsPerSec: natsbus.MaxMsgsPerSecLimit}}
			bb, err := natsbus.Open(b.Context(), cfg, b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer bb.Close()
			ctx, cancel := context.WithCancel(b.Context())
			received := make(chan struct{}, 1<<16)
			var wg sync.WaitGroup
			wg.Go(func() {
				_ = bb.Consume(ctx, func(d bus.Delivery) {
					_ = d.Ack()
					received <- struct{}{}
				})
			})
			defer func() { cancel(); wg.Wait() }()

			opts := []nats.Option{nats.Token("bench-admin")}
			if viaBridge {
				opts = []nats.Option{nats.Token("bench-wx"), nats.CustomInboxPrefix(natsbus.BridgeInboxPrefix("wx"))}
			}
			nc, err := nats.Connect(bb.ClientURL(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			subject := bb.Subjects().In("wechat", "demo")
			in := inbound("m", "What's the weather like in Paris tomorrow?")
			in.Channel = "wechat"
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				in.ID = fmt.Sprint(i)
				if _, err := js.Publish(ctx, subject, mustJSON(b, in), jetstream.WithMsgID("wechat:"+in.ID)); err != nil {
					b.Fatal(err)
				}
				<-received
			}
		})
	}
}
