// Package alfworld is a household text game after ALFWorld (AgentBench, function-call version): find an
// object hidden in a procedurally generated room, maybe clean, heat or cool it, and put it somewhere, or
// examine it under the desklamp, with one tool, take_action, whose admissible arguments are listed each turn.
package alfworld

import (
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// The family's name, turn limit and tool, as in AgentBench.
const (
	Name     = "alfworld"
	MaxTurns = 20
	ToolName = "take_action"
)

const toolParameters = `{"type":"object","properties":{"action":{"type":"string","description":"One of the admissible actions, exactly as listed, e.g. \"go to cabinet 1\", \"open cabinet 1\", \"take apple 1 from countertop 1\", \"put apple 1 in/on fridge 1\", \"clean mug 1 with sinkbasin 1\", \"use desklamp 1\", \"look\", \"inventory\"."}},"required":["action"]}`

// Family generates alfworld instances. It holds no state, so one value serves any number of goroutines.
type Family struct{}

// New returns the alfworld family.
func New() *Family { return &Family{} }

// Name is "alfworld".
func (*Family) Name() string { return Name }

// MaxTurns is 20, AgentBench's limit for ALFWorld.
func (*Family) MaxTurns() int { return MaxTurns }

// Tools is take_action, in a fresh slice so callers cannot change another's.
func (*Family) Tools() []proto.Tool {
	return []proto.Tool{{
		Name:        ToolName,
		Description: "Take one action in the household. Choose it from the admissible actions listed with each observation.",
		Parameters:  toolParameters,
	}}
}

// New generates the instance of (split, seed). Held-out instances are those whose task type, goal and room
// layout hash to 0 modulo 5; no opening, hence no instance, occurs in both splits.
func (*Family) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	return generate(split, seed)
}
