package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/switchboard-chat/switchboard/internal/health"
)

// Check reports, for `switchboard check` (result name "admin"), whether
// the server of cfg could start now: admin.listen is free to bind, or
// empty (the server is off).
func Check(ctx context.Context, cfg Config) health.Result {
	r := health.Result{Name: "admin"}
	if cfg.Listen == "" {
		r.Status, r.Detail = health.OK, "disabled (admin.listen is empty)"
		return r
	}
	if err := health.Bindable(ctx, cfg.Listen); err != nil {
		r.Status, r.Detail = health.Fail, fmt.Sprintf("cannot listen on %s: %v (is the daemon already running? change admin.listen, or set it to \"\" to turn it off)", cfg.Listen, err)
		return r
	}
	r.Status, r.Detail = health.OK, fmt.Sprintf("%s is free to bind", cfg.Listen)
	return r
}

// ErrHealthURL is what [Healthy] wraps when the URL itself is unusable (a
// usage error, not an unhealthy daemon).
var ErrHealthURL = errors.New("unusable health URL")

// Healthy asks url (the daemon's /healthz) whether the daemon is alive,
// within 3 s: nil on 200, else an error that says what answered. It is
// `switchboard healthcheck`, which the container image runs, since the
// image has no shell or curl.
func Healthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHealthURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return nil
}
