package natsbus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"switchboard/bus"
	"switchboard/bus/natsbus"
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
