// Package archtest holds no code: its test checks that the packages import
// each other in the directions docs/architecture.md documents.
package archtest
