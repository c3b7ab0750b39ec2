package bus

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://tok@host:4222":                    "nats://xxxxx@host:4222",
		"nats://u:pw@host:4222,nats://other:4222": "nats://u:xxxxx@host:4222,nats://other:4222",
		"nats://a:4222, nats://u:p@b:4222":        "nats://a:4222,nats://u:xxxxx@b:4222",
		"nats://host:4222":                        "nats://host:4222",
		"nats://tok%zz@host:4222":                 "<unparsable URL>",
		"http://localhost:11434/v1/models":        "http://localhost:11434/v1/models",
		"":                                        "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
