package tools

import "context"

// Publisher sends a message durably on the bus: Publish blocks until the
// bus stored it (JetStream acknowledgement), and a non-empty msgID is the
// de-duplication id (Nats-Msg-Id), so publishing the same message again
// with the same id is harmless. natsbus.Bus implements it. Implementations
// are safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, msgID string) error
}
