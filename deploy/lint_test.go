// Package deploy_test lints the packaging files: the Dockerfile (the rules
// hadolint checks that matter here) and the systemd unit with its
// hardening drop-in. There is no Docker engine or systemd in CI's
// container, so these files are checked by reading them; .ci/run builds the
// images when `docker info` succeeds.
package deploy_test

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is one FROM ... and its instructions.
type stage struct {
	from  instruction
	name  string // AS name, lower case; "" without one
	image string
	body  []instruction
}

func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ins []instruction
	var cur *instruction
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur != nil && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		cont := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSuffix(trimmed, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: n, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + strings.TrimSpace(trimmed)
		}
		if !cont {
			ins = append(ins, *cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: line %d: continuation at the end of the file", path, cur.line)
	}
	var stages []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := stage{from: in, image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = strings.ToLower(f[2])
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s: line %d: %s before the first FROM", path, in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages
}

var pinnedImage = regexp.MustCompile(`^[a-z0-9./_-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$`)

// TestDockerfileLint (issue 21): the images are built from pinned bases,
// run as a non-root user with a HEALTHCHECK, fetch nothing with ADD, and
// install Debian packages without recommends and without leaving the apt
// lists behind; besides the distroless default there is a target "full"
// with node, npx, bash and bubblewrap for stdio MCP servers and the bash
// tool.
func TestDockerfileLint(t *testing.T) {
	stages := parseDockerfile(t, "../Dockerfile")
	names := map[string]bool{}
	for _, st := range stages {
		if st.name != "" {
			names[st.name] = true
		}
	}
	for _, st := range stages {
		img := st.image
		if names[strings.ToLower(img)] {
			continue // FROM an earlier stage
		}
		if !pinnedImage.MatchString(img) || (!strings.Contains(img, ":") && !strings.Contains(img, "@")) {
			t.Errorf("line %d: FROM %s: pin the base image with a tag or digest", st.from.line, img)
		}
		if strings.HasSuffix(strings.Split(img, "@")[0], ":latest") {
			t.Errorf("line %d: FROM %s: no latest tag", st.from.line, img)
		}
		for _, in := range st.body {
			checkInstruction(t, in)
		}
	}
	final := map[string]stage{"default": stages[len(stages)-1]}
	for _, st := range stages {
		if st.name == "full" {
			final["full"] = st
		}
	}
	if _, ok := final["full"]; !ok {
		t.Fatal("no stage named full (Debian slim with node, npx, bash, bubblewrap)")
	}
	for target, st := range final {
		user, health, entry := "", false, false
		for _, in := range st.body {
			switch in.cmd {
			case "USER":
				user = in.args
			case "HEALTHCHECK":
				health = !strings.EqualFold(strings.TrimSpace(in.args), "NONE")
			case "ENTRYPOINT", "CMD":
				entry = true
			}
		}
		if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
			t.Errorf("target %s: USER %q: run as a non-root user", target, user)
		}
		if !health {
			t.Errorf("target %s: no HEALTHCHECK", target)
		}
		if !entry {
			t.Errorf("target %s: no ENTRYPOINT", target)
		}
	}
	var full string
	for _, in := range final["full"].body {
		if in.cmd == "RUN" {
			full += in.args + " "
		}
	}
	for _, pkg := range []string{"nodejs", "npm", "bash", "bubblewrap"} {
		if !regexp.MustCompile(`apt-get install[^&;]*\b` + pkg + `\b`).MatchString(full) {
			t.Errorf("target full does not install %s", pkg)
		}
	}
	if st := final["default"]; !strings.HasPrefix(st.image, "gcr.io/distroless/") {
		t.Errorf("default target FROM %s, want distroless", st.image)
	}
}

func checkInstruction(t *testing.T, in instruction) {
	t.Helper()
	switch in.cmd {
	case "ADD":
		if regexp.MustCompile(`(?i)\b(https?|ftp)://`).MatchString(in.args) {
			t.Errorf("line %d: ADD of a URL: download with a checked RUN instead", in.line)
		} else {
			t.Errorf("line %d: ADD: use COPY for local files", in.line)
		}
	case "MAINTAINER":
		t.Errorf("line %d: MAINTAINER is deprecated", in.line)
	case "RUN":
		if !strings.Contains(in.args, "apt-get") {
			return
		}
		if strings.Contains(in.args, "apt-get install") {
			if !strings.Contains(in.args, "--no-install-recommends") {
				t.Errorf("line %d: apt-get install without --no-install-recommends", in.line)
			}
			if !regexp.MustCompile(`apt-get install[^&;]*\s-y\b`).MatchString(in.args) {
				t.Errorf("line %d: apt-get install without -y", in.line)
			}
			if !strings.Contains(in.args, "apt-get update") {
				t.Errorf("line %d: apt-get install without apt-get update in the same RUN", in.line)
			}
			if !strings.Contains(in.args, "rm -rf /var/lib/apt/lists/*") {
				t.Errorf("line %d: apt-get install without rm -rf /var/lib/apt/lists/* in the same RUN", in.line)
			}
		}
		if strings.Contains(in.args, "apt-get upgrade") || strings.Contains(in.args, "apt-get dist-upgrade") {
			t.Errorf("line %d: no apt-get upgrade in an image", in.line)
		}
	}
}

// unit is a systemd unit file: section -> key -> values, in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u, section := unit{}, ""
	for n, line := range strings.Split(strings.ReplaceAll(string(data), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: line %d: %q is not a key=value in a section", path, n+1, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// serviceKeys are the [Service] keys the files may use: a misspelt key is
// ignored by systemd with a warning, which would silently drop hardening.
var serviceKeys = []string{
	"Type", "User", "Group", "EnvironmentFile", "WorkingDirectory", "StateDirectory", "ExecStart", "ExecReload", "KillSignal",
	"TimeoutStopSec", "Restart", "RestartSec", "NoNewPrivileges", "ProtectSystem", "ReadWritePaths", "ProtectHome",
	"PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
	"ProtectControlGroups", "ProtectClock", "ProtectHostname", "RestrictNamespaces", "RestrictRealtime",
	"RestrictSUIDSGID", "LockPersonality", "MemoryDenyWriteExecute", "SystemCallArchitectures", "SystemCallFilter",
	"RestrictAddressFamilies", "CapabilityBoundingSet", "AmbientCapabilities", "UMask",
}

// TestSystemdUnit (issue 21): the shipped unit runs what the docs promise
// (stdio MCP servers on Node, the bash tool's bubblewrap sandbox): no
// MemoryDenyWriteExecute, the namespaces and calls bwrap needs; it stays
// hardened otherwise; the documented drop-in restores the strict settings
// for a daemon without them. Every key is a known one.
func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, "switchboard.service")
	drop := parseUnit(t, "switchboard-hardening.conf")
	for name, file := range map[string]unit{"switchboard.service": u, "switchboard-hardening.conf": drop} {
		for k := range file["Service"] {
			if !slices.Contains(serviceKeys, k) {
				t.Errorf("%s: unknown [Service] key %s", name, k)
			}
		}
	}
	svc := u["Service"]
	last := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if u["Unit"] == nil || u["Install"] == nil || svc == nil {
		t.Fatal("switchboard.service: want [Unit], [Service] and [Install]")
	}
	for k, want := range map[string]string{
		"User": "switchboard", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "CapabilityBoundingSet": "", "KillSignal": "SIGTERM", "Restart": "on-failure",
	} {
		if got := last(k); got != want || len(svc[k]) == 0 {
			t.Errorf("switchboard.service: %s=%q, want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(last("ExecStart"), "/usr/local/bin/switchboard serve --config /etc/switchboard/config.yaml") {
		t.Errorf("switchboard.service: ExecStart=%q", last("ExecStart"))
	}
	if v := last("MemoryDenyWriteExecute"); v == "yes" || v == "true" {
		t.Error("switchboard.service: MemoryDenyWriteExecute=yes kills Node-based MCP servers (npx); it belongs in the drop-in")
	}
	ns := strings.Fields(last("RestrictNamespaces"))
	for _, want := range []string{"user", "mnt", "pid"} {
		if !slices.Contains(ns, want) {
			t.Errorf("switchboard.service: RestrictNamespaces=%v blocks bubblewrap's %s namespace", ns, want)
		}
	}
	allowed := strings.Fields(svc["SystemCallFilter"][0])
	for _, want := range []string{"@system-service", "@mount", "pivot_root", "capset"} {
		if !slices.Contains(allowed, want) {
			t.Errorf("switchboard.service: SystemCallFilter allow list %v lacks %s (bubblewrap)", allowed, want)
		}
	}
	for _, deny := range svc["SystemCallFilter"][1:] {
		if d := strings.Fields(strings.TrimPrefix(deny, "~")); slices.Contains(d, "@privileged") || slices.Contains(d, "@mount") {
			t.Errorf("switchboard.service: SystemCallFilter=%s takes back what bubblewrap needs", deny)
		}
	}

	ds := drop["Service"]
	if len(drop) != 1 || ds == nil {
		t.Fatal("switchboard-hardening.conf: want one [Service] section")
	}
	if v := ds["MemoryDenyWriteExecute"]; len(v) != 1 || v[0] != "yes" {
		t.Errorf("drop-in: MemoryDenyWriteExecute=%v, want yes", v)
	}
	if v := ds["RestrictNamespaces"]; len(v) != 1 || v[0] != "yes" {
		t.Errorf("drop-in: RestrictNamespaces=%v, want yes", v)
	}
	if f := ds["SystemCallFilter"]; len(f) < 2 || f[0] != "" || !slices.Contains(f, "~@privileged @resources") {
		t.Errorf("drop-in: SystemCallFilter=%q: want a reset (empty) and then ~@privileged @resources", f)
	}
}
