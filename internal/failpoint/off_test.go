//go:build !failpoints

package failpoint

import "testing"

// TestHitIsInertWithoutTheTag: with the variable set, a build without the
// tag runs through every point.
func TestHitIsInertWithoutTheTag(t *testing.T) {
	t.Setenv(EnvVar, "received")
	for _, name := range Names() {
		Hit(name)
	}
	if Enabled {
		t.Fatal("Enabled in a build without the failpoints tag")
	}
}
