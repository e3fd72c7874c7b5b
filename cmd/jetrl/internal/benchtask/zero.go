// Package benchtask holds task families made for benchmarks rather than for learning.
package benchtask

import (
	"encoding/json"
	"fmt"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// ZeroName is the zero-latency family's name on the wire.
const ZeroName = "zero"

// Zero is a task family that costs (almost) nothing to step: every instance is a fixed number of turns, each
// a choice between two options ("pick a", "pick b"), of which one per turn (drawn from the seed) is right.
// The reward is the fraction of turns chosen right, so groups have variance and the whole GRPO path runs.
// Texts are one or two words, so the policy's features cost little too. It measures the data plane of the
// mesh: what is left is encoding, NATS and the services' own work.
type Zero struct{ turns int }

// NewZero returns the family with episodes of exactly turns turns (at least 1).
func NewZero(turns int) *Zero { return &Zero{turns: max(turns, 1)} }

// Name implements task.Family.
func (z *Zero) Name() string { return ZeroName }

// MaxTurns implements task.Family: one more than an episode needs, so no episode hits the limit.
func (z *Zero) MaxTurns() int { return z.turns + 1 }

// Tools implements task.Family.
func (z *Zero) Tools() []proto.Tool {
	return []proto.Tool{{Name: "pick", Description: "Pick one option.",
		Parameters: `{"type":"object","properties":{"option":{"type":"string","enum":["a","b"]}},"required":["option"]}`}}
}

var zeroCalls = []proto.ToolCall{{Name: "pick", Arguments: `{"option":"a"}`}, {Name: "pick", Arguments: `{"option":"b"}`}}

// New implements task.Family. Held-out instances use the seed's complement, so the splits never share one.
func (z *Zero) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	if split == proto.SplitHeldout {
		seed = ^seed
	}
	return &zeroInstance{turns: z.turns, seed: seed}, nil
}

type zeroInstance struct {
	turns, turn, right int
	seed               uint64
}

// want is the right option of the current turn (0 or 1): the top bit of the seed and turn, mixed.
func (g *zeroInstance) want() int {
	x := g.seed + uint64(g.turn+1)*0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return int((x ^ x>>31) >> 63)
}

func (g *zeroInstance) Start() task.Opening {
	return task.Opening{Instruction: "pick", Observation: "s0", Admissible: zeroCalls}
}

func (g *zeroInstance) Step(call proto.ToolCall) task.Result {
	got := -1
	switch call {
	case zeroCalls[0]: // the calls as offered, without parsing their arguments
		got = 0
	case zeroCalls[1]:
		got = 1
	default:
		got = zeroParse(call)
	}
	if got == g.want() {
		g.right++
	}
	g.turn++
	if g.turn >= g.turns {
		return task.Result{Observation: "end", Done: true, Reward: float64(g.right) / float64(g.turns), Status: proto.StatusCompleted}
	}
	obs := ""
	if g.turn < len(zeroObservations) {
		obs = zeroObservations[g.turn]
	} else {
		obs = fmt.Sprintf("s%d", g.turn)
	}
	return task.Result{Observation: obs, Admissible: zeroCalls, Status: proto.StatusRunning}
}

// zeroObservations are the observations of the first turns, made once.
var zeroObservations = func() []string {
	out := make([]string, 64)
	for i := range out {
		out[i] = fmt.Sprintf("s%d", i)
	}
	return out
}()

// zeroParse reads the option of a call written otherwise than as offered (-1 if it names none).
func zeroParse(call proto.ToolCall) int {
	got := -1
	if call.Name == "pick" {
		var args struct {
			Option string `json:"option"`
		}
		if json.Unmarshal([]byte(call.Arguments), &args) == nil {
			switch args.Option {
			case "a":
				got = 0
			case "b":
				got = 1
			}
		}
	}
	return got
}

func (g *zeroInstance) Solve() proto.ToolCall { return zeroCalls[g.want()] }
