package buildinfo

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	got := String("switchboard", "v1.2.3")
	if !strings.HasPrefix(got, "switchboard v1.2.3") || !strings.HasSuffix(got, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("String = %q", got)
	}
	// A test binary has no module version: without one set at build time
	// the version is "dev".
	if got := String("x", ""); !regexp.MustCompile(`^x (dev|v\S+)( \([0-9a-f]{1,12}(, modified)?\))? go`).MatchString(got) {
		t.Errorf("String without a version = %q", got)
	}
}
