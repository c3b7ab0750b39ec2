package search_test

import (
	"context"
	"testing"
)

// contextWithCancel returns a context derived from t.Context and its
// cancel function.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}
