package web

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/internal/cli"
)

// PairTTL is how long a pairing code can be used.
const PairTTL = 15 * time.Minute

// PairDir is the directory of pending pairing codes under data_dir. A code
// is a file named by the hex sha256 of the code (the code itself is never
// stored); using it removes the file, so it works once. Whoever can write
// data_dir can mint codes: the operator.
func PairDir(dataDir string) string { return filepath.Join(dataDir, "web-pair") }

// pairing is a pending code's file.
type pairing struct {
	User    string `json:"user,omitempty"` // empty: any allowed user
	Expires int64  `json:"expires"`
}

var errBadCode = errors.New("this pairing code is unknown, used or expired")

// normCode upper-cases a code and drops the dashes and spaces people type.
func normCode(code string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' {
			return -1
		}
		if r >= 'a' && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, code)
}

// newCode mints a one-time pairing code valid for PairTTL, for user (empty:
// any allowed user), and returns it formatted "ABCD-EFGH".
func newCode(dir, user string, now time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("web: pairing codes: %w", err)
	}
	pruneCodes(dir, now)
	code := rand.Text()[:8]
	b, _ := json.Marshal(pairing{User: user, Expires: now.Add(PairTTL).Unix()})
	if err := os.WriteFile(filepath.Join(dir, hex.EncodeToString(digest(code))), b, 0o600); err != nil {
		return "", fmt.Errorf("web: pairing codes: %w", err)
	}
	return code[:4] + "-" + code[4:], nil
}

// redeem uses code for user: it must exist, be unexpired and be for user
// or anyone. The file is removed first, so a code works once even when two
// logins race.
func redeem(dir, code, user string, now time.Time) error {
	c := normCode(code)
	if len(c) != 8 {
		return errBadCode
	}
	path := filepath.Join(dir, hex.EncodeToString(digest(c)))
	b, err := os.ReadFile(path)
	if err != nil {
		return errBadCode
	}
	if err := os.Remove(path); err != nil {
		return errBadCode // used by a concurrent login
	}
	var p pairing
	if json.Unmarshal(b, &p) != nil || now.Unix() > p.Expires {
		return errBadCode
	}
	if p.User != "" && p.User != user {
		return fmt.Errorf("this pairing code was made for another user")
	}
	return nil
}

// pruneCodes removes expired codes.
func pruneCodes(dir string, now time.Time) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		var p pairing
		if err == nil && json.Unmarshal(b, &p) == nil && now.Unix() <= p.Expires {
			continue
		}
		_ = os.Remove(path)
	}
}

// RunVerb is `switchboard web pair [--config FILE] [--user NAME]`:
// configFlag registers the command line's --config, load reads the
// configuration it names (data_dir, channels.web, and how to name it).
func RunVerb(args []string, stdout, stderr io.Writer, configFlag func(*flag.FlagSet) *string,
	load func(path string) (dataDir string, web *Config, source string, err error)) error {
	if len(args) == 0 || args[0] != "pair" {
		return fmt.Errorf("%w: web: the only subcommand is pair (see switchboard web pair -h)", cli.ErrUsage)
	}
	fs := flag.NewFlagSet("web pair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	user := fs.String("user", "", "the code logs in only this user (default: any of channels.web.allow_users)")
	if err := cli.Parse(fs, args[1:]); err != nil {
		return err
	}
	dataDir, web, source, err := load(*path)
	if err != nil {
		return err
	}
	return Pair(stdout, dataDir, web, *user, source)
}

// Pair is "switchboard web pair": it mints a one-time pairing code in
// dataDir (the running daemon reads it at login), for user only when user
// is set, and prints it. source names the configuration in errors.
func Pair(stdout io.Writer, dataDir string, web *Config, user, source string) error {
	if web == nil || !web.Enabled() {
		return errors.New("web: the web console is off: set channels.web.allow_users (SWITCHBOARD_WEB_USERS) in " + source)
	}
	if user != "" && !slices.Contains(web.AllowUsers, user) {
		return fmt.Errorf("web: %q is not in channels.web.allow_users %v", user, []string(web.AllowUsers))
	}
	code, err := newCode(PairDir(dataDir), user, time.Now())
	if err != nil {
		return err
	}
	addr, _ := bindAddr(web.Listen)
	fmt.Fprintf(stdout, "Pairing code: %s\nOpen http://%s/login and enter it within %s; it works once.\n", code, addr, PairTTL)
	return nil
}
