package tools

// PathGuard reports whether session s may reach a workspace path rel
// (clean, slash-separated, relative to the workspace; "." is the
// workspace itself). The daemon composes it from memory privacy (another
// user's private memory folder) and the inbox rule (another chat's
// uploads). Tools that touch workspace files apply it through
// workspace.Guard, to the path as given and to its real path after
// symbolic links. It must be safe for concurrent use.
type PathGuard func(s Session, rel string) bool

// For binds g to s, as a workspace.Allow; a nil g gives nil (every path).
func (g PathGuard) For(s Session) func(rel string) bool {
	if g == nil {
		return nil
	}
	return func(rel string) bool { return g(s, rel) }
}
