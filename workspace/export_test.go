package workspace

// SetTestHookResolved installs f to run between a guarded path's check
// and its open; the returned func removes it.
func SetTestHookResolved(f func(real string)) func() {
	testHookResolved = f
	return func() { testHookResolved = nil }
}
