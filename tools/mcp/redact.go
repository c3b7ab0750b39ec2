package mcp

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces a secret of an MCP server's configuration wherever the
// configuration, a server's status or its log lines are shown.
const Redacted = "(redacted)"

// minSecret is the shortest configured value hidden in free text (errors,
// log lines): shorter ones ("1", "on") would blank out ordinary words and
// protect nothing. The configuration itself ([ServerConfig.Redacted])
// hides every value whatever its length.
const minSecret = 4

// Redacted returns c as it may be shown: every server as
// [ServerConfig.Redacted] returns it. The dashboard's configuration page
// and every other display of the mcp section use it.
func (c Config) Redacted() Config {
	if c.Servers == nil {
		return c
	}
	out := Config{Servers: make(map[string]ServerConfig, len(c.Servers))}
	for name, s := range c.Servers {
		out.Servers[name] = s.Redacted()
	}
	return out
}

// Redacted returns the server's configuration as it may be shown: every
// env value and every header value replaced with "(redacted)", and the URL
// with its userinfo and query values hidden ([RedactURL]); the names (of
// variables, headers and query parameters) are kept. The command and its
// arguments are shown as configured: secrets belong in env.
func (s ServerConfig) Redacted() ServerConfig {
	s.Args = slices.Clone(s.Args)
	s.Env = redactValues(s.Env)
	s.Headers = redactValues(s.Headers)
	s.URL = RedactURL(s.URL)
	return s
}

func redactValues(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out
}

// RedactURL returns u with its userinfo, query values and fragment
// replaced with "(redacted)" (query parameter names are kept):
// "https://(redacted)@host/mcp?api_key=(redacted)". A URL that does not
// parse is hidden whole when it could carry any of them.
func RedactURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		if strings.ContainsAny(u, "@?#") {
			return "(unparsable URL, " + Redacted + ")"
		}
		return u
	}
	hadUser := pu.User != nil
	pu.User = nil
	if pu.RawQuery != "" || pu.ForceQuery {
		params := strings.Split(pu.RawQuery, "&")
		for i, p := range params {
			if name, _, ok := strings.Cut(p, "="); ok {
				params[i] = name + "=" + Redacted
			}
		}
		pu.RawQuery = strings.Join(params, "&")
	}
	if pu.Fragment != "" {
		pu.Fragment, pu.RawFragment = Redacted, ""
	}
	out := pu.String()
	if hadUser {
		// Written out here: url.User would escape the parentheses.
		out = strings.Replace(out, "//", "//"+Redacted+"@", 1)
	}
	return out
}

// redactor hides one server's secrets in free text: the errors it
// reports (GET /mcp, `switchboard check`, a tool call's error), its log
// lines (the SDK's and the stderr of a stdio server included). The zero
// redactor hides nothing.
type redactor struct{ r *strings.Replacer }

// newRedactor returns the redactor of s's secrets: its env and header
// values (and the credential after a header's scheme, "Bearer x"), its
// URL's userinfo, query values and fragment, each as configured, decoded
// and escaped.
func newRedactor(s ServerConfig) redactor {
	set := map[string]bool{}
	add := func(v string) {
		for _, f := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			if len(f) >= minSecret {
				set[f] = true
			}
		}
	}
	for _, v := range s.Env {
		add(v)
	}
	for _, v := range s.Headers {
		add(v)
		if _, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			add(strings.TrimSpace(cred))
		}
	}
	if pu, err := url.Parse(s.URL); err == nil {
		if pu.User != nil {
			add(pu.User.Username())
			if p, ok := pu.User.Password(); ok {
				add(p)
			}
		}
		for _, p := range strings.Split(pu.RawQuery, "&") {
			if _, v, ok := strings.Cut(p, "="); ok {
				add(v)
				if dv, err := url.QueryUnescape(v); err == nil {
					add(dv)
				}
			}
		}
		add(pu.Fragment)
		add(pu.EscapedFragment())
	}
	if len(set) == 0 {
		return redactor{}
	}
	// Longest first: a secret that contains another is hidden whole.
	secrets := slices.SortedFunc(maps.Keys(set), func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(secrets))
	for _, v := range secrets {
		pairs = append(pairs, v, Redacted)
	}
	return redactor{strings.NewReplacer(pairs...)}
}

// text returns s with the secrets hidden.
func (r redactor) text(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// err returns err with the secrets hidden in its text; errors.Is and
// errors.As still see err.
func (r redactor) err(err error) error {
	if err == nil {
		return nil
	}
	if msg := r.text(err.Error()); msg != err.Error() {
		return &redactedError{msg: msg, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// logger returns log with the secrets hidden in every record's message
// and attributes.
func (r redactor) logger(log *slog.Logger) *slog.Logger {
	if r.r == nil {
		return log
	}
	return slog.New(redactHandler{next: log.Handler(), r: r})
}

// redactHandler passes records on with a redactor's secrets hidden.
type redactHandler struct {
	next slog.Handler
	r    redactor
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.text(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return redactHandler{next: h.next.WithAttrs(red), r: h.r}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{next: h.next.WithGroup(name), r: h.r}
}

// attr hides the secrets in a's value: strings and anything that prints
// (errors, structs) are written out and replaced when they hold one.
func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(h.r.text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, x := range g {
			red[i] = h.attr(x)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if red := h.r.text(s); red != s {
			a.Value = slog.StringValue(red)
		} else {
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
