package bash

import (
	"github.com/switchboard-chat/switchboard/internal/health"
	"github.com/switchboard-chat/switchboard/tools"
)

// Check reports [CheckSandbox] for `switchboard check` (result name
// "bash"): a failure when [New] would refuse to start (bwrap missing), a
// warning with sandbox none. lookPath nil means exec.LookPath.
func Check(cfg tools.BashConfig, lookPath func(string) (string, error)) health.Result {
	r := health.Result{Name: "bash"}
	warning, err := CheckSandbox(cfg, lookPath)
	switch {
	case err != nil:
		r.Status, r.Detail = health.Fail, err.Error()
	case warning != "":
		r.Status, r.Detail = health.Warn, warning
	default:
		r.Status, r.Detail = health.OK, "commands run in the bubblewrap sandbox"
	}
	return r
}
