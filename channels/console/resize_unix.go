//go:build unix

package console

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/term"
)

// watchResize sets t's size from the terminal fd now and on every
// SIGWINCH, until the returned stop is called (it joins the goroutine).
func watchResize(fd int, t *term.Terminal) (stop func()) {
	setSize(fd, t)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
				setSize(fd, t)
			}
		}
	})
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}
