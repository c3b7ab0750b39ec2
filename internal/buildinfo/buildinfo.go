// Package buildinfo describes the running binary: its version, the VCS
// revision it was built from and the Go toolchain, as `switchboard
// version` prints them and MCP servers are told.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// String describes this build as "<name> <version> (<revision>[,
// modified]) <go version> <os>/<arch>". version is the one set at build
// time (-ldflags "-X main.version=v1.2.3"); when it is empty the module
// version from the build info is used, else "dev". The revision (12 hex
// digits) and "modified" come from the VCS stamp, when there is one.
func String(name, version string) string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	out := name + " " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " (" + rev
		if dirty {
			out += ", modified"
		}
		out += ")"
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
