//go:build race

package main

// raceEnabled tells tests that build the binary to build it with -race too,
// so it reuses the race-instrumented package cache of the test build.
const raceEnabled = true
