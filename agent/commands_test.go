package agent

import "testing"

func TestParseCommand(t *testing.T) {
	for in, want := range map[string]string{
		"/new": cmdNew, " /STOP ": cmdStop, "/help@my_bot": cmdHelp, "/status now": cmdStatus,
		"/usr/bin is a folder": cmdNone, "hello /new": cmdNone, "": cmdNone, "/": cmdNone,
	} {
		if got := parseCommand(in).name; got != want {
			t.Errorf("parseCommand(%q) = %q, want %q", in, got, want)
		}
	}
}
