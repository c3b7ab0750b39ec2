package bustest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// RawLogin logs in to the NATS listener at url the way a guesser does,
// without a client library: it opens a TCP connection, reads the server's
// INFO, sends CONNECT with fields (user, pass, auth_token, ...; verbose,
// pedantic and protocol are set) and a PING, and returns the server's
// answer line: "PONG", or "-ERR '...'". Each step has timeout.
func RawLogin(t testing.TB, url string, fields map[string]any, timeout time.Duration) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("server greeting %q: %v", line, err)
	}
	msg := map[string]any{"verbose": false, "pedantic": false, "protocol": 1}
	for k, v := range fields {
		msg[k] = v
	}
	body, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", body); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("answer to CONNECT: %v", err)
	}
	return strings.TrimSpace(line)
}
