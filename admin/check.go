package admin

import (
	"context"
	"fmt"

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
