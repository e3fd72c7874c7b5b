package task

import (
	"fmt"
	"io"

	"github.com/jetrl/jetrl/proto"
)

// Session runs one instance under its family's turn limit.
type Session struct {
	inst     Instance
	maxTurns int
	turn     int
	done     bool
	closed   bool
}

// NewSession generates the instance and starts it.
func NewSession(f Family, split string, seed uint64) (*Session, Opening, error) {
	if err := ValidSplit(split); err != nil {
		return nil, Opening{}, err
	}
	inst, err := f.New(split, seed)
	if err != nil {
		return nil, Opening{}, err
	}
	return &Session{inst: inst, maxTurns: f.MaxTurns()}, inst.Start(), nil
}

// Step applies one call; the call that uses the last turn without finishing ends the session with
// proto.StatusTurnLimit and reward 0.
func (s *Session) Step(call proto.ToolCall) (Result, error) {
	if s.done {
		return Result{}, fmt.Errorf("%w: after %d turns", proto.ErrSessionDone, s.turn)
	}
	s.turn++
	r := s.inst.Step(call)
	if r.Done {
		s.done = true
		return r, nil
	}
	r.Status = proto.StatusRunning
	if s.turn >= s.maxTurns {
		s.done = true
		r.Done, r.Reward, r.Status = true, 0, proto.StatusTurnLimit
		r.Observation += fmt.Sprintf("\nTurn limit of %d reached.", s.maxTurns)
		r.Admissible = nil
	}
	return r, nil
}

// Turn is the number of calls applied so far.
func (s *Session) Turn() int { return s.turn }

// Done reports whether the session has ended.
func (s *Session) Done() bool { return s.done }

// Close releases what the instance holds (a family whose instances own resources, such as an in-memory
// database, implements io.Closer); it is safe to call more than once.
func (s *Session) Close() error {
	s.done = true
	if c, ok := s.inst.(io.Closer); ok && !s.closed {
		s.closed = true
		return c.Close()
	}
	return nil
}

// Solve is the scripted solver's next call.
func (s *Session) Solve() proto.ToolCall { return s.inst.Solve() }
