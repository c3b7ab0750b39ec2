package natsbus

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/switchboard-chat/switchboard/bus"
)

// BridgeConsumerName returns the name of a bridge's durable consumer on the
// out stream: "bridge_<name>".
func BridgeConsumerName(bridge string) string { return "bridge_" + bridge }

// BridgeInboxPrefix returns the inbox prefix a bridge must use for its
// replies (JetStream acknowledgements, API answers, pulled messages) when
// the embedded server enforces isolation: "_INBOX_<name>" (nats.go
// nats.CustomInboxPrefix, nats.js connect option inboxPrefix). Each bridge
// may subscribe only to its own "_INBOX_<name>.>", so no bridge can read the
// replies addressed to another.
func BridgeInboxPrefix(bridge string) string { return "_INBOX_" + bridge }

// Permissions lists the subjects a NATS user may publish to and subscribe
// to; anything else is denied. Subjects may hold wildcards.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// BridgePermissions returns what the bridge named bridge, speaking for
// channels, may do on a bus with subject prefix p:
//
// publish:
//
//	<p>.in.<channel>.>                         its inbound messages
//	$JS.API.CONSUMER.CREATE.<OUT>.bridge_<name>.<p>.out.<channel>.>
//	                                           (re)create its durable consumer, filtered to one channel
//	$JS.API.CONSUMER.INFO.<OUT>.bridge_<name>  look it up
//	$JS.API.CONSUMER.MSG.NEXT.<OUT>.bridge_<name>  pull from it
//	$JS.ACK.<OUT>.bridge_<name>.>              acknowledge what it pulled
//	$JS.API.INFO                               JetStream account info (client libraries ask for it)
//
// subscribe:
//
//	<p>.out.<channel>.>    its outbound messages (core NATS)
//	<p>.event.<channel>.>  agent events of its chats
//	<p>.dlq.<channel>      dead letters of its channel
//	_INBOX_<name>.>        its replies ([BridgeInboxPrefix])
//
// <OUT> is the out stream ([StreamsFor]). The consumer-create subject
// carries the filter, and the server refuses a request whose configured
// filter differs from it, so a bridge cannot point its consumer at another
// channel. Publishing inbound messages through JetStream needs no API
// permission: the stream's acknowledgement is a reply to the bridge's inbox.
func BridgePermissions(prefix, bridge string, channels []string) Permissions {
	subj := bus.Subjects{Prefix: prefix}
	out := StreamsFor(prefix).Out
	cons := BridgeConsumerName(bridge)
	var p Permissions
	for _, ch := range channels {
		p.Publish = append(p.Publish,
			prefix+".in."+ch+".>",
			"$JS.API.CONSUMER.CREATE."+out+"."+cons+"."+subj.OutChannel(ch),
		)
		p.Subscribe = append(p.Subscribe,
			subj.OutChannel(ch),
			prefix+".event."+ch+".>",
			subj.DLQ(ch),
		)
	}
	p.Publish = append(p.Publish,
		"$JS.API.CONSUMER.INFO."+out+"."+cons,
		"$JS.API.CONSUMER.MSG.NEXT."+out+"."+cons,
		"$JS.ACK."+out+"."+cons+".>",
		"$JS.API.INFO",
	)
	p.Subscribe = append(p.Subscribe, BridgeInboxPrefix(bridge)+".>")
	return p
}

func (p Permissions) server() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Clone(p.Publish)},
		Subscribe: &server.SubjectPermission{Allow: slices.Clone(p.Subscribe)},
	}
}

// principal is an authenticated identity of the embedded server.
type principal struct {
	label  string       // shown in the server's logs and monitoring
	perms  *Permissions // nil: full access
	bridge string       // the bridge's name, whose account it joins; "": the global account
}

type secretEntry struct {
	secret []byte
	who    principal
}

// authenticator is the embedded server's client authentication: the
// daemon's internal token, bus.admin, and one identity per bridge. It
// implements server.Authentication; it is immutable after newAuthenticator
// except for the bridge accounts, set once by setAccounts, and safe for
// concurrent use. Until setAccounts a bridge is refused.
type authenticator struct {
	tokens   []secretEntry          // internal, admin and bridge tokens
	users    map[string]secretEntry // user name -> password
	nkeys    map[string]principal   // public user NKey -> bridge
	accounts atomic.Pointer[map[string]*server.Account]
	guard    *loginGuard
	log      *slog.Logger
}

// setAccounts makes the bridges' accounts known: from now on a bridge is
// accepted into its own.
func (a *authenticator) setAccounts(accs map[string]*server.Account) { a.accounts.Store(&accs) }

// newAuthenticator builds the authentication of cfg (which has passed
// Validate) with internalToken for the daemon's own connection.
func newAuthenticator(cfg Config, internalToken string, log *slog.Logger) *authenticator {
	a := &authenticator{users: map[string]secretEntry{}, nkeys: map[string]principal{}, guard: newLoginGuard(log), log: log}
	a.tokens = append(a.tokens, secretEntry{[]byte(internalToken), principal{label: clientName}})
	admin := principal{label: "admin"}
	if cfg.Admin.Token != "" {
		a.tokens = append(a.tokens, secretEntry{[]byte(cfg.Admin.Token), admin})
	}
	if cfg.Admin.User != "" {
		a.users[cfg.Admin.User] = secretEntry{[]byte(cfg.Admin.Password), admin}
	}
	for name, b := range cfg.Bridges {
		perms := BridgePermissions(cfg.SubjectPrefix, name, b.Channels)
		who := principal{label: "bridge:" + name, perms: &perms, bridge: name}
		switch {
		case b.Token != "":
			a.tokens = append(a.tokens, secretEntry{[]byte(b.Token), who})
		case b.User != "":
			a.users[b.User] = secretEntry{[]byte(b.Password), who}
		case b.NKey != "":
			a.nkeys[b.NKey] = who
		}
	}
	return a
}

// Check authenticates a client connection and registers its permissions.
// A remote address with too many failed logins is refused unchecked
// ([loginGuard]).
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	addr, now := c.RemoteAddress(), time.Now()
	if !a.guard.allow(addr, now) {
		a.guard.failed(addr, credentialKind(o), true, now)
		return false
	}
	who, ok := a.identify(o, c.GetNonce())
	if !ok {
		a.guard.failed(addr, credentialKind(o), false, now)
		return false
	}
	u := &server.User{Username: who.label}
	if who.bridge != "" {
		accs := a.accounts.Load()
		if accs == nil || (*accs)[who.bridge] == nil {
			a.log.Debug("nats bridge refused: its account is not set up yet", "bridge", who.bridge)
			return false
		}
		u.Account = (*accs)[who.bridge]
	}
	if who.perms != nil {
		u.Permissions = who.perms.server()
	}
	c.RegisterUser(u)
	return true
}

func (a *authenticator) identify(o *server.ClientOpts, nonce []byte) (principal, bool) {
	switch {
	case o.Nkey != "":
		who, ok := a.nkeys[o.Nkey]
		if !ok || !verifyNonce(o.Nkey, o.Sig, nonce) {
			return principal{}, false
		}
		return who, true
	case o.Username != "":
		e, ok := a.users[o.Username]
		if !ok || subtle.ConstantTimeCompare(e.secret, []byte(o.Password)) != 1 {
			return principal{}, false
		}
		return e.who, true
	case o.Token != "":
		var who principal
		found := false
		for _, e := range a.tokens { // every entry is compared: no early exit
			if subtle.ConstantTimeCompare(e.secret, []byte(o.Token)) == 1 {
				who, found = e.who, true
			}
		}
		return who, found
	}
	return principal{}, false
}

// credentialKind names the kind of credential a client offered, for the
// log: never its value.
func credentialKind(o *server.ClientOpts) string {
	switch {
	case o.Nkey != "":
		return "nkey"
	case o.Username != "":
		return "user"
	case o.Token != "":
		return "token"
	}
	return "none"
}

// verifyNonce checks a client's signature of the server's nonce with its
// public NKey, as nats-server does.
func verifyNonce(pubKey, sig string, nonce []byte) bool {
	if sig == "" || len(nonce) == 0 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	pub, err := nkeys.FromPublicKey(pubKey)
	if err != nil {
		return false
	}
	return pub.Verify(nonce, raw) == nil
}

func remoteAddr(a net.Addr) string {
	if a == nil {
		return "in-process"
	}
	return a.String()
}

// newInternalToken returns a random token for the daemon's in-process
// connection.
func newInternalToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("natsbus: internal token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
