// Package os is a shell task after AgentBench's OS interaction (function-call version): each instance is a
// generated Unix filesystem (service logs, configs, user homes, app data) and a question about it, answered
// by running a real subset of the shell through bash_action and submitting with answer_action.
package os

import (
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// The family's name, turn limit and tools, as in AgentBench.
const (
	Name       = "os"
	MaxTurns   = 8
	BashTool   = "bash_action"
	AnswerTool = "answer_action"
	FinishTool = "finish_action"
)

const (
	bashParameters   = `{"type":"object","properties":{"script":{"type":"string","description":"One shell command or a pipeline joined by |, e.g. \"ls -l /var/log\", \"grep -c ERROR /var/log/app/app.log\", \"sort /srv/x.txt | uniq -c | sort -n -r | head -n 1\". Supported: cat, cd, echo, find, grep, head, ls, pwd, sort, tail, uniq, wc."}},"required":["script"]}`
	answerParameters = `{"type":"object","properties":{"answer":{"type":"string","description":"The answer alone, e.g. \"42\" or \"alice\"."}},"required":["answer"]}`
	finishParameters = `{"type":"object","properties":{}}`
)

// Family generates os instances. It holds no state, so one value serves any number of goroutines.
type Family struct{}

// New returns the os family.
func New() *Family { return &Family{} }

// Name is "os".
func (*Family) Name() string { return Name }

// MaxTurns is 8, AgentBench's limit for OS interaction.
func (*Family) MaxTurns() int { return MaxTurns }

// Tools are bash_action, answer_action and finish_action, in a fresh slice so callers cannot change another's.
func (*Family) Tools() []proto.Tool {
	return []proto.Tool{
		{Name: BashTool, Description: "Run a shell command (or a pipeline) on the machine as root and see its output. The working directory persists between calls (cd); the filesystem is read-only; redirection, ';', '&&' and command substitution are not supported.", Parameters: bashParameters},
		{Name: AnswerTool, Description: "Submit the answer to the question. This ends the episode.", Parameters: answerParameters},
		{Name: FinishTool, Description: "End the episode without answering.", Parameters: finishParameters},
	}
}

// New generates the instance of (split, seed). Held-out instances are those whose instruction and opening
// hash to 0 modulo 5; no opening, hence no instance, occurs in both splits.
func (*Family) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	return generate(split, seed)
}
