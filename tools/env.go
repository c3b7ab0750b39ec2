package tools

import (
	"slices"
	"strings"
)

// safeEnv are the variables passed to child processes (bash commands, MCP
// servers over stdio) by default: what programs need to run and to format
// text, nothing that carries credentials.
var safeEnv = []string{"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR"}

// secretWords mark a variable name that probably holds a credential.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE"}

// LooksSecret reports whether an environment variable name suggests a
// credential (API_KEY, GITHUB_TOKEN, DB_PASSWORD, AWS_SECRET_ACCESS_KEY...).
func LooksSecret(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// ScrubEnv returns the entries of environ ("NAME=value") that a child
// process may see: the safe set (PATH, HOME, LANG, LANGUAGE, LC_*, TZ,
// TERM, USER, LOGNAME, SHELL, TMPDIR) and the names in pass, which the
// operator chose explicitly. Everything else — and any safe-set name that
// looks like a credential — is dropped. Order follows environ.
func ScrubEnv(environ []string, pass []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		switch {
		case slices.Contains(pass, name):
			out = append(out, kv)
		case LooksSecret(name):
		case slices.Contains(safeEnv, name), strings.HasPrefix(name, "LC_"):
			out = append(out, kv)
		}
	}
	return out
}
