// Package bustest holds the helpers every package's NATS tests share: polling with a deadline and a
// bounded test context.
package bustest

import (
	"context"
	"testing"
	"time"
)

// Eventually polls cond until it holds, failing the test if it does not within the deadline.
func Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctx is a context that ends with the test, or after 30 s.
func Ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
