// Package scripted runs a throw-away environment for a daemon driven by a
// scripted model: a temporary folder and an http.Handler (llmtest's
// OpenAI-compatible script) served on a loopback port. `switchboard demo`
// and `switchboard bench` run the daemon inside it.
//
// Run creates the folder, serves the model, calls the caller's function
// with the folder's paths and the model's URL, then stops the model server
// (joined) and removes the folder unless asked to keep it. Without a
// model (a model served elsewhere), Run only makes the folder.
package scripted

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// shutdownTimeout bounds the model server's graceful shutdown; what is
// still streaming then is closed.
const shutdownTimeout = 2 * time.Second

// Env is what Run prepared.
type Env struct {
	// Dir is the temporary folder; DataDir and Workspace are inside it
	// (not yet created).
	Dir       string
	DataDir   string
	Workspace string
	// ModelURL is the OpenAI-compatible base URL of the model
	// (http://127.0.0.1:PORT/v1).
	ModelURL string
}

// Run makes a temporary folder whose name starts with prefix, serves model
// on 127.0.0.1 at a random port and runs fn. When fn returns, the server is
// shut down and joined, and the folder is removed unless keep is set. It
// returns fn's error, else the server's. With a nil model nothing is
// served and Env.ModelURL is empty.
func Run(ctx context.Context, prefix string, keep bool, model http.Handler, fn func(ctx context.Context, env Env) error) (err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return fmt.Errorf("scripted: %w", err)
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	env := Env{Dir: dir, DataDir: filepath.Join(dir, "data"), Workspace: filepath.Join(dir, "workspace")}
	if model == nil {
		return fn(ctx, env)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("scripted: model listener: %w", err)
	}
	srv := &http.Server{Handler: model, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		if serr := <-served; err == nil && !errors.Is(serr, http.ErrServerClosed) {
			err = fmt.Errorf("scripted: model server: %w", serr)
		}
	}()
	env.ModelURL = "http://" + ln.Addr().String() + "/v1"
	return fn(ctx, env)
}
