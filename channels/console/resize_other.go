//go:build !unix

package console

import "golang.org/x/term"

// watchResize sets t's size from the terminal fd once (no SIGWINCH here).
func watchResize(fd int, t *term.Terminal) (stop func()) {
	setSize(fd, t)
	return func() {}
}
