// Package breaker wraps remote calls in gobreaker/v2 circuit breakers, one per remote host.
package breaker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/sony/gobreaker/v2"
)

// Settings of every breaker in a Set.
type Settings struct {
	// ConsecutiveFailures opens the breaker.
	ConsecutiveFailures uint32
	// OpenFor is how long an open breaker refuses calls before it lets some through (half-open).
	OpenFor time.Duration
	// HalfOpenCalls is how many calls a half-open breaker lets through at once; as many successes in a
	// row close it. More than one, so that a group's episodes starting together on a recovered host are
	// not refused all but one.
	HalfOpenCalls uint32
	// OnChange is called on every state change (for logs and metrics); may be nil.
	OnChange func(name string, from, to gobreaker.State)
}

func (s *Settings) setDefaults() {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 3
	}
	if s.OpenFor == 0 {
		s.OpenFor = 5 * time.Second
	}
	if s.HalfOpenCalls == 0 {
		s.HalfOpenCalls = 8
	}
}

// Set holds one breaker per remote name, created on first use.
type Set[T any] struct {
	settings Settings
	mu       sync.Mutex
	byName   map[string]*gobreaker.CircuitBreaker[T]
}

// NewSet returns an empty set.
func NewSet[T any](s Settings) *Set[T] {
	s.setDefaults()
	return &Set[T]{settings: s, byName: map[string]*gobreaker.CircuitBreaker[T]{}}
}

// Get returns the breaker of one remote.
func (s *Set[T]) Get(name string) *gobreaker.CircuitBreaker[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cb, ok := s.byName[name]; ok {
		return cb
	}
	st := gobreaker.Settings{
		Name:        name,
		Timeout:     s.settings.OpenFor,
		MaxRequests: s.settings.HalfOpenCalls,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= s.settings.ConsecutiveFailures
		},
		// Only infrastructure errors count against a host; an answer that refuses bad input is a healthy host.
		IsSuccessful:  func(err error) bool { return err == nil || !IsInfrastructure(err) },
		IsExcluded:    IsExcluded,
		OnStateChange: s.settings.OnChange,
	}
	cb := gobreaker.NewCircuitBreaker[T](st)
	s.byName[name] = cb
	return cb
}

// Execute runs fn through the named breaker.
func (s *Set[T]) Execute(name string, fn func() (T, error)) (T, error) {
	return s.Get(name).Execute(fn)
}

// State of the named breaker.
func (s *Set[T]) State(name string) gobreaker.State { return s.Get(name).State() }

// IsInfrastructure reports whether err means the remote side failed (timeout, gone, open breaker)
// rather than refusing a request.
func IsInfrastructure(err error) bool {
	return errors.Is(err, proto.ErrEnvTimeout) || errors.Is(err, proto.ErrEnvUnavailable) ||
		errors.Is(err, proto.ErrShuttingDown) ||
		errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// IsExcluded reports the errors a breaker counts neither way, as they say nothing of the remote's health:
// the caller gave up (its context ended), or the remote answered that a task failed (proto.ErrInternal: a
// task's bug goes with its instance to whichever host plays it, and a group's members all meet it).
func IsExcluded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, proto.ErrInternal)
}
