package natsbus

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
)

// Config configures the bus (YAML section "bus").
type Config struct {
	// URL of an external NATS server; empty starts the embedded server
	// in-process with JetStream.
	URL string `yaml:"url"`
	// Listen is the embedded server's client listener ("host:port"); empty
	// means in-process only. Ignored when URL is set.
	Listen string `yaml:"listen"`
	// SubjectPrefix is the first subject token (default "chat").
	SubjectPrefix string `yaml:"subject_prefix"`
	// MaxTextBytes bounds an inbound envelope's text (default 65536).
	MaxTextBytes int `yaml:"max_text_bytes"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:4222", SubjectPrefix: "chat", MaxTextBytes: 65536}
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// Validate reports every problem, each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.Listen != "" && c.URL == "" {
		if _, port, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("bus.listen: must be host:port, got %q", c.Listen))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("bus.listen: port must be a number from 0 to 65535 (0 picks a free port), got %q", port))
		}
	}
	if !prefixRE.MatchString(c.SubjectPrefix) {
		errs = append(errs, fmt.Errorf("bus.subject_prefix: must be dot-separated tokens of [A-Za-z0-9_-], got %q", c.SubjectPrefix))
	}
	if c.MaxTextBytes <= 0 || c.MaxTextBytes > 4<<20 {
		errs = append(errs, fmt.Errorf("bus.max_text_bytes: must be between 1 and 4194304, got %d", c.MaxTextBytes))
	}
	return errors.Join(errs...)
}
