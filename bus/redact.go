package bus

import (
	"net/url"
	"strings"
)

// RedactURL hides the credentials of a URL, or of a comma-separated list of
// them (NATS server lists), for logs and errors: the password of "user:password@", and a
// lone "token@", which NATS treats as a token ("nats://xxxxx@host:4222").
// A part that does not parse as a URL but holds an "@" is replaced whole.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		parts[i] = p
		pu, err := url.Parse(p)
		if err != nil {
			if strings.Contains(p, "@") {
				parts[i] = "<unparsable URL>"
			}
			continue
		}
		if pu.User == nil {
			continue
		}
		if _, hasPass := pu.User.Password(); hasPass {
			pu.User = url.UserPassword(pu.User.Username(), "xxxxx")
		} else {
			pu.User = url.User("xxxxx")
		}
		parts[i] = pu.String()
	}
	return strings.Join(parts, ",")
}
