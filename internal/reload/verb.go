package reload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/internal/cli"
)

// ErrRefused is returned by RunVerb when the daemon refused the new
// configuration (exit code 1; the problems are printed).
var ErrRefused = errors.New("the running daemon refused the configuration")

// RunVerb is `switchboard reload [--config F] [--admin URL]`: it asks the
// running daemon to re-read its configuration with POST /reload on its
// admin listener (loopback by default; admin.listen of the configuration,
// or --admin) and prints what was applied, kept until restart or refused.
// adminListen returns admin.listen of the configuration at path.
func RunVerb(ctx context.Context, args []string, stdout, stderr io.Writer, adminListen func(path string) (string, error)) error {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default ./config.yaml when it exists, else the built-in defaults)")
	admin := fs.String("admin", "", "the daemon's admin URL (default: http://<admin.listen> of the configuration)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	url := strings.TrimSuffix(*admin, "/")
	if url == "" {
		listen, err := adminListen(*path)
		if err != nil {
			return err
		}
		if listen == "" {
			return errors.New("reload: admin.listen is off: send SIGHUP to the daemon instead (kill -HUP <pid>)")
		}
		url = "http://" + listen
	}
	// A reload may drain agents whose workspace or tools changed, each for
	// up to shutdown_timeout, before it answers.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/reload", nil)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reload: is the daemon running? %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		_, err = stdout.Write(body)
		return err
	case http.StatusUnprocessableEntity:
		_, _ = stdout.Write(body)
		return fmt.Errorf("reload: %w", ErrRefused)
	}
	return fmt.Errorf("reload: %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
}
