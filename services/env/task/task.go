// Package task defines the task families behind the env function-call API and runs their sessions.
// A family generates instances from (split, seed); an instance is a multi-turn game driven by tool calls.
package task

import (
	"fmt"
	"sort"

	"github.com/jetrl/jetrl/proto"
)

// Family is one kind of task (os, db, kg, webshop, alfworld).
type Family interface {
	// Name is the family's name on the wire and in metrics.
	Name() string
	// MaxTurns is the turn limit of every instance.
	MaxTurns() int
	// Tools are the family's tools in the OpenAI tool format.
	Tools() []proto.Tool
	// New generates the instance of split (proto.SplitTrain or proto.SplitHeldout) with this seed. The same
	// (split, seed) always gives the same instance; no instance of one split occurs in the other.
	New(split string, seed uint64) (Instance, error)
}

// Opening is what an agent sees when a session starts.
type Opening struct {
	// Instruction states the goal, in words.
	Instruction string
	// Observation describes the initial state.
	Observation string
	// Admissible lists the calls that make sense now; an agent may call anything else too.
	Admissible []proto.ToolCall
}

// Result is the outcome of one tool call.
type Result struct {
	Observation string
	Admissible  []proto.ToolCall
	Done        bool
	Reward      float64
	// Status is proto.StatusRunning until Done, then completed / invalid-action (turn limits are the Session's).
	Status  string
	Metrics map[string]float64
}

// Instance is one generated game. It is not safe for concurrent use; a Session serializes calls.
type Instance interface {
	Start() Opening
	// Step applies one call. A malformed, unknown or badly argued call is not a Go error: it returns an
	// observation that says what is wrong, and the game goes on.
	Step(call proto.ToolCall) Result
	// Solve returns the scripted solver's next call from the current state; following it always wins.
	Solve() proto.ToolCall
}

// Registry maps family names to families.
type Registry map[string]Family

// Get returns the family called name, or proto.ErrUnknownTask listing the known ones.
func (r Registry) Get(name string) (Family, error) {
	f, ok := r[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %v)", proto.ErrUnknownTask, name, r.Names())
	}
	return f, nil
}

// Names lists the families, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ValidSplit checks a split name.
func ValidSplit(split string) error {
	if split != proto.SplitTrain && split != proto.SplitHeldout {
		return fmt.Errorf("%w: %q (want %q or %q)", proto.ErrUnknownSplit, split, proto.SplitTrain, proto.SplitHeldout)
	}
	return nil
}
