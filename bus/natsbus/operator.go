package natsbus

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// OperatorTokenFile is the name, inside data_dir, of the operator
// credential the daemon generates when the embedded server listens on TCP
// and bus.admin is not configured: 64 lower-case hex digits (32 random
// bytes) and a newline, mode 0600. `switchboard chat`, `switchboard bus
// tail`, `switchboard check` and `switchboard bus context` read it.
const OperatorTokenFile = "bus-operator.token"

// maxTokenFileBytes bounds what ReadOperatorToken reads.
const maxTokenFileBytes = 4096

// OperatorTokenPath returns where the operator credential of data_dir is.
func OperatorTokenPath(dataDir string) string { return filepath.Join(dataDir, OperatorTokenFile) }

// OperatorToken returns the operator token of data_dir, creating
// [OperatorTokenFile] (mode 0600, exclusively, so two processes never
// write different tokens) when it does not exist yet; created reports
// that. An existing file is checked as [ReadOperatorToken] does. dataDir
// must exist.
func OperatorToken(dataDir string) (token string, created bool, err error) {
	token, err = ReadOperatorToken(dataDir)
	if !errors.Is(err, fs.ErrNotExist) {
		return token, false, err
	}
	token, err = newInternalToken()
	if err != nil {
		return "", false, err
	}
	path := OperatorTokenPath(dataDir)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // created meanwhile by another process
		token, err = ReadOperatorToken(dataDir)
		return token, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("natsbus: operator credential: %w", err)
	}
	_, err = f.WriteString(token + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", false, fmt.Errorf("natsbus: operator credential: write %s: %w", path, err)
	}
	return token, true, nil
}

// ReadOperatorToken reads the operator token of data_dir
// ([OperatorTokenFile]). It refuses a data_dir that group or others may
// write (anyone could plant the file there), and a file that is not a
// regular file (a symbolic link included), has more than one hard link, is
// not owned by the user running this process, may be read or written by
// group or others, or holds no token or one shorter than
// [MinSecretLength]. The error wraps [fs.ErrNotExist] when there is no
// file.
func ReadOperatorToken(dataDir string) (string, error) {
	if err := checkTokenDir(dataDir); err != nil {
		return "", err
	}
	path := OperatorTokenPath(dataDir)
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("natsbus: operator credential %s does not exist: the daemon creates it when it first starts with this data_dir (or set bus.admin): %w", path, err)
	}
	if err != nil {
		return "", fmt.Errorf("natsbus: operator credential: %w", err)
	}
	if err := checkTokenFile(path, st); err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("natsbus: operator credential: %w", err)
	}
	defer f.Close()
	// The file checked above must be the one opened (no swap in between).
	if fst, err := f.Stat(); err != nil || !os.SameFile(st, fst) {
		return "", fmt.Errorf("natsbus: operator credential %s changed while being read", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("natsbus: operator credential: %w", err)
	}
	token := string(bytes.TrimSpace(data))
	if len(data) > maxTokenFileBytes || token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("natsbus: operator credential %s must hold one token on one line; delete it and restart the daemon to generate a new one", path)
	}
	if len(token) < MinSecretLength {
		return "", fmt.Errorf("natsbus: operator credential %s holds a token of %d characters, shorter than %d: the daemon never writes one (it generates 64 hex digits); delete it and restart the daemon to generate a new one", path, len(token), MinSecretLength)
	}
	return token, nil
}

// checkTokenDir refuses a data_dir in which others could plant or swap
// the operator credential: one that group or others may write.
func checkTokenDir(dataDir string) error {
	st, err := os.Stat(dataDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("natsbus: operator credential: data_dir %s does not exist: the daemon creates it when it first starts: %w", dataDir, err)
		}
		return fmt.Errorf("natsbus: operator credential: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("natsbus: operator credential: data_dir %s has mode %04o: group and others may create files in it, so anyone could plant the credential; chmod 750 %s (or 700)", dataDir, perm, dataDir)
	}
	return nil
}

// checkTokenFile refuses what is not a private regular file.
func checkTokenFile(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("natsbus: operator credential %s is not a regular file (%s): delete it and restart the daemon to generate a new one", path, st.Mode().Type())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("natsbus: operator credential %s has mode %04o: group and others must not read or write it (chmod 600 %s), or delete it and restart the daemon to generate a new one", path, perm, path)
	}
	if uid, links, ok := fileOwner(st); ok {
		if me := processUID(); uid != me {
			return fmt.Errorf("natsbus: operator credential %s belongs to uid %d, not to uid %d running this process: someone else may have written it; run as the daemon's user, or delete it and restart the daemon to generate a new one", path, uid, me)
		}
		if links > 1 {
			return fmt.Errorf("natsbus: operator credential %s has %d hard links: another name can read or replace it; delete it and restart the daemon to generate a new one", path, links)
		}
	}
	return nil
}

// Operator is how an operator's process (`switchboard chat`, `bus tail`,
// `bus context`, the nats CLI) reaches the bus of a configuration: URL and at
// most one of Token, or User and Password. With an external server (bus.url)
// the credentials stay in URL, as configured.
type Operator struct {
	URL      string
	Token    string
	User     string
	Password string
	// Source says where the credentials come from, for messages:
	// "bus.url", "bus.admin" or the path of the operator credential file.
	Source string
}

// URLFlag registers --url on fs, the bus of `chat`, `status`, `bus tail`
// and `heartbeat now` when not the configuration's ([Config.OperatorAt]).
func URLFlag(fs *flag.FlagSet) *string {
	return fs.String("url", "", "NATS URL of the bus, credentials in it (nats://TOKEN@host:4222, nats://user:password@host:4222); default: the configuration's bus, as an operator")
}

// OperatorAt returns how `chat`, `status`, `bus tail` and `heartbeat now`
// connect: to busURL as given (its credentials in it, their --url) when it
// is set, else as the operator of this configuration's bus ([Config.Operator]).
func (c Config) OperatorAt(busURL, dataDir string) (Operator, error) {
	if busURL != "" {
		return Operator{URL: busURL, Source: "--url"}, nil
	}
	return c.Operator(dataDir)
}

// Operator returns how an operator reaches the bus of this configuration:
// bus.url as it is (credentials in it), or the embedded listener
// nats://bus.listen (a wildcard host replaced by loopback) with bus.admin
// when set, else with the token of [OperatorTokenFile] in dataDir. It fails
// when the embedded server is in-process only, when bus.listen asks for a
// random port (unknown to other processes), or when the credential file is
// missing (the daemon has not started yet) or unsafe.
func (c Config) Operator(dataDir string) (Operator, error) {
	if c.URL != "" {
		return Operator{URL: c.URL, Source: "bus.url"}, nil
	}
	if c.Listen == "" {
		return Operator{}, errors.New("natsbus: the daemon's bus is in-process only (bus.listen is empty); set bus.listen or bus.url")
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return Operator{}, fmt.Errorf("natsbus: bus.listen: must be host:port, got %q", c.Listen)
	}
	if n, err := strconv.Atoi(port); err != nil || n == 0 {
		return Operator{}, fmt.Errorf("natsbus: bus.listen %q: the port is chosen at random when the daemon starts; set a fixed port", c.Listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	op := Operator{URL: "nats://" + net.JoinHostPort(host, port)}
	switch {
	case c.Admin.Token != "":
		op.Token, op.Source = c.Admin.Token, "bus.admin"
	case c.Admin.User != "":
		op.User, op.Password, op.Source = c.Admin.User, c.Admin.Password, "bus.admin"
	default:
		token, err := ReadOperatorToken(dataDir)
		if err != nil {
			return Operator{}, err
		}
		op.Token, op.Source = token, OperatorTokenPath(dataDir)
	}
	return op, nil
}

// Options returns the connect options that authenticate op.
func (op Operator) Options() []nats.Option {
	switch {
	case op.Token != "":
		return []nats.Option{nats.Token(op.Token)}
	case op.User != "":
		return []nats.Option{nats.UserInfo(op.User, op.Password)}
	}
	return nil
}

// OperatorDial returns the URL and the connect options of [Config.Operator]:
// what `switchboard chat` and `switchboard bus tail` pass to nats.Connect.
func (c Config) OperatorDial(dataDir string) (url string, opts []nats.Option, err error) {
	op, err := c.Operator(dataDir)
	if err != nil {
		return "", nil, err
	}
	return op.URL, op.Options(), nil
}

// loopbackHost reports whether a listen host reaches only this machine:
// localhost, 127.0.0.0/8 or ::1. The wildcards "", 0.0.0.0 and :: do not.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.WithZone("").IsLoopback()
}

// WithOperatorToken returns the configuration the daemon opens: when the
// embedded server listens on TCP and bus.admin is not configured, bus.admin
// becomes the token of [OperatorTokenFile] in dataDir, created at the first
// start ([OperatorToken]), so that no client ever connects anonymously and
// the operator's verbs find it. created reports that the file was made now;
// path is empty when no file is used.
func (c Config) WithOperatorToken(dataDir string) (cfg Config, path string, created bool, err error) {
	if c.URL != "" || c.Listen == "" || c.Admin.Set() {
		return c, "", false, nil
	}
	token, created, err := OperatorToken(dataDir)
	if err != nil {
		return c, "", false, err
	}
	c.Admin.Token = token
	return c, OperatorTokenPath(dataDir), created, nil
}
