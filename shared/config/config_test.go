package config

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A request the cluster never answers (dropped on a leader change) costs one attempt, not the whole deadline.
func TestRetryEachBoundsEveryAttempt(t *testing.T) {
	calls := 0
	start := time.Now()
	err := retryEach(context.Background(), 200*time.Millisecond, 30*time.Second, func(ctx context.Context) error {
		calls++
		if calls == 1 {
			<-ctx.Done() // hangs until its own deadline
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("retryEach: %v", err)
	}
	if calls != 2 {
		t.Fatalf("%d calls, want 2", calls)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v: the hung attempt was not cut at its own deadline", took)
	}
}

func TestRetryEachGivesUpAtTheDeadlineWithTheLastError(t *testing.T) {
	errNotYet := errors.New("not yet")
	calls := 0
	err := retryEach(context.Background(), time.Second, 1200*time.Millisecond, func(context.Context) error {
		calls++
		return errNotYet
	})
	if !errors.Is(err, errNotYet) {
		t.Fatalf("err %v, want %v", err, errNotYet)
	}
	if calls < 2 {
		t.Fatalf("%d calls before the deadline, want at least 2", calls)
	}
}
