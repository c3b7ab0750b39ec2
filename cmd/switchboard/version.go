package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/switchboard-chat/switchboard/admin"
	"github.com/switchboard-chat/switchboard/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version or VCS revision from the build info is used.
var version = ""

// runHealthcheck implements `switchboard healthcheck`: GET /healthz on the
// admin listener (from the config, or --url) and exit 0 on 200, 1
// otherwise. The container image uses it, since it has no shell or curl.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	url := fs.String("url", "", "health URL (default: http://<admin.listen>/healthz from the config)")
	if err := parseFlags(fs, args); err != nil {
		return cli.ExitCode(err, stderr)
	}
	if *url == "" {
		cfg, _, err := LoadConfig(*path)
		if err != nil {
			fmt.Fprintln(stderr, "switchboard:", err)
			return 2
		}
		if cfg.Admin.Listen == "" {
			fmt.Fprintln(stderr, "switchboard: healthcheck: admin.listen is empty, so there is no health endpoint")
			return 2
		}
		*url = "http://" + cfg.Admin.Listen + "/healthz"
	}
	if err := admin.Healthy(ctx, *url); err != nil {
		fmt.Fprintln(stderr, "switchboard: healthcheck:", err)
		if errors.Is(err, admin.ErrHealthURL) {
			return 2
		}
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}
