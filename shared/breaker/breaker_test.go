package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetrl/jetrl/shared/bus/bustest"
	"sync"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/shared/breaker"
	"github.com/sony/gobreaker/v2"
)

var eventually = bustest.Eventually

func fail(err error) func() (int, error) { return func() (int, error) { return 0, err } }

func ok() (int, error) { return 1, nil }

func TestBreakerOpensOnlyOnInfrastructureErrors(t *testing.T) {
	tests := []struct {
		name          string
		givenCalls    []error // nil is a success
		expectedState gobreaker.State
	}{
		{name: "three timeouts open it", givenCalls: []error{proto.ErrEnvTimeout, proto.ErrEnvTimeout, proto.ErrEnvTimeout}, expectedState: gobreaker.StateOpen},
		{name: "two timeouts do not", givenCalls: []error{proto.ErrEnvTimeout, proto.ErrEnvTimeout}, expectedState: gobreaker.StateClosed},
		{name: "mixed infrastructure errors open it", givenCalls: []error{proto.ErrEnvUnavailable, proto.ErrEnvTimeout, proto.ErrShuttingDown}, expectedState: gobreaker.StateOpen},
		{name: "caller cancellations and task failures count neither way", givenCalls: []error{
			proto.ErrEnvTimeout, proto.ErrEnvTimeout, context.Canceled, proto.ErrInternal, context.DeadlineExceeded, proto.ErrEnvTimeout,
		}, expectedState: gobreaker.StateOpen},
		{name: "task failures alone do not open it", givenCalls: []error{proto.ErrInternal, proto.ErrInternal, proto.ErrInternal, proto.ErrInternal}, expectedState: gobreaker.StateClosed},
		{name: "wrapped infrastructure errors open it", givenCalls: []error{
			fmt.Errorf("host h: %w", proto.ErrEnvTimeout), fmt.Errorf("host h: %w", proto.ErrEnvTimeout), fmt.Errorf("host h: %w", proto.ErrEnvTimeout),
		}, expectedState: gobreaker.StateOpen},
		{name: "a success in between resets the count", givenCalls: []error{proto.ErrEnvTimeout, proto.ErrEnvTimeout, nil, proto.ErrEnvTimeout, proto.ErrEnvTimeout}, expectedState: gobreaker.StateClosed},
		{name: "refusals are a healthy host", givenCalls: []error{
			proto.ErrUnknownTask, proto.ErrUnknownTask, proto.ErrUnknownTask, proto.ErrUnknownSession, proto.ErrUnknownSession,
			proto.ErrMalformed, proto.ErrSchema, proto.ErrSessionDone, proto.ErrUnknownSplit, proto.ErrHostFull,
		}, expectedState: gobreaker.StateClosed},
		{name: "a refusal in between resets the count", givenCalls: []error{proto.ErrEnvTimeout, proto.ErrEnvTimeout, proto.ErrUnknownSession, proto.ErrEnvTimeout, proto.ErrEnvTimeout}, expectedState: gobreaker.StateClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := breaker.NewSet[int](breaker.Settings{ConsecutiveFailures: 3, OpenFor: time.Minute})
			for i, err := range tc.givenCalls {
				_, got := set.Execute("h", fail(err))
				if !errors.Is(got, err) {
					t.Fatalf("call %d returned %v, want the call's own error %v", i, got, err)
				}
			}
			if st := set.State("h"); st != tc.expectedState {
				t.Fatalf("state = %v, want %v", st, tc.expectedState)
			}
		})
	}
}

func TestOpenBreakerRefusesWithoutCalling(t *testing.T) {
	set := breaker.NewSet[int](breaker.Settings{ConsecutiveFailures: 2, OpenFor: time.Minute})
	for range 2 {
		_, _ = set.Execute("h", fail(proto.ErrEnvTimeout))
	}
	called := false
	_, err := set.Execute("h", func() (int, error) { called = true; return 1, nil })
	if called {
		t.Fatal("open breaker let a call through")
	}
	if !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("err = %v, want ErrOpenState", err)
	}
	if !breaker.IsInfrastructure(err) {
		t.Fatal("an open breaker's refusal must count as an infrastructure error")
	}
	// Breakers are per remote: another host is unaffected.
	if v, err := set.Execute("other", ok); err != nil || v != 1 {
		t.Fatalf("other host: %v, %v", v, err)
	}
	if set.State("other") != gobreaker.StateClosed {
		t.Fatalf("other host state = %v", set.State("other"))
	}
}

func TestBreakerHalfOpensAfterOpenFor(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	set := breaker.NewSet[int](breaker.Settings{ConsecutiveFailures: 1, OpenFor: 500 * time.Millisecond, HalfOpenCalls: 1,
		OnChange: func(name string, from, to gobreaker.State) {
			mu.Lock()
			changes = append(changes, fmt.Sprintf("%s:%v->%v", name, from, to))
			mu.Unlock()
		}})
	_, _ = set.Execute("h", fail(proto.ErrEnvUnavailable))
	if set.State("h") != gobreaker.StateOpen {
		t.Fatalf("state = %v, want open", set.State("h"))
	}
	eventually(t, 5*time.Second, "half-open", func() bool { return set.State("h") == gobreaker.StateHalfOpen })
	if v, err := set.Execute("h", ok); err != nil || v != 1 {
		t.Fatalf("half-open trial call: %v, %v", v, err)
	}
	if set.State("h") != gobreaker.StateClosed {
		t.Fatalf("state after a good trial = %v, want closed", set.State("h"))
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"h:closed->open", "h:open->half-open", "h:half-open->closed"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("state changes = %v, want %v", changes, want)
	}
}

// A half-open breaker lets HalfOpenCalls calls through at once, refuses more, and closes after that many
// successes in a row.
func TestHalfOpenBreakerLetsSeveralCallsThrough(t *testing.T) {
	set := breaker.NewSet[int](breaker.Settings{ConsecutiveFailures: 1, OpenFor: 50 * time.Millisecond, HalfOpenCalls: 2})
	_, _ = set.Execute("h", fail(proto.ErrEnvTimeout))
	eventually(t, 5*time.Second, "half-open", func() bool { return set.State("h") == gobreaker.StateHalfOpen })
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	results := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := set.Execute("h", func() (int, error) { entered <- struct{}{}; <-release; return 1, nil })
			results <- err
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("a half-open breaker did not let 2 calls through")
		}
	}
	if _, err := set.Execute("h", ok); !errors.Is(err, gobreaker.ErrTooManyRequests) {
		t.Fatalf("third call while two are in flight: %v, want ErrTooManyRequests", err)
	}
	close(release)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if st := set.State("h"); st != gobreaker.StateClosed {
		t.Fatalf("state after 2 good calls = %v, want closed", st)
	}
}

func TestDefaults(t *testing.T) {
	set := breaker.NewSet[int](breaker.Settings{})
	for i := range 2 {
		_, _ = set.Execute("h", fail(proto.ErrEnvTimeout))
		if set.State("h") != gobreaker.StateClosed {
			t.Fatalf("open after %d failures; default is 3", i+1)
		}
	}
	_, _ = set.Execute("h", fail(proto.ErrEnvTimeout))
	if set.State("h") != gobreaker.StateOpen {
		t.Fatalf("state after 3 failures = %v, want open", set.State("h"))
	}
	if set.Get("h") != set.Get("h") {
		t.Fatal("Get must return the same breaker for one name")
	}
}

func TestIsInfrastructure(t *testing.T) {
	tests := []struct {
		givenErr error
		expected bool
	}{
		{proto.ErrEnvTimeout, true},
		{proto.ErrEnvUnavailable, true},
		{proto.ErrShuttingDown, true},
		{proto.ErrInternal, false},
		{gobreaker.ErrOpenState, true},
		{gobreaker.ErrTooManyRequests, true},
		{fmt.Errorf("step 3: host h: %w", proto.ErrEnvTimeout), true},
		{nil, false},
		{proto.ErrUnknownTask, false},
		{proto.ErrUnknownSession, false},
		{proto.ErrHostFull, false},
		{proto.ErrMalformed, false},
		{proto.ErrBadNumber, false},
		{context.Canceled, false},
		{errors.New("something else"), false},
	}
	for _, tc := range tests {
		if got := breaker.IsInfrastructure(tc.givenErr); got != tc.expected {
			t.Errorf("IsInfrastructure(%v) = %v, want %v", tc.givenErr, got, tc.expected)
		}
	}
}
