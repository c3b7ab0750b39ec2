//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Hit does nothing: this build has no failpoints.
func Hit(string) {}
