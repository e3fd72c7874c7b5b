// Package os is a shell task after AgentBench's OS interaction (function-call version): each instance is a
// generated Unix filesystem (service logs, configs, user homes, app data) and a question about it, answered
// by running a real subset of the shell through bash_action and submitting with answer_action.
//
// # Questions
//
// Five kinds, each naming a base directory where the session starts: lines of a service's log with a level
// (/var/log), a key's value in a service's configuration (/etc), the size of that configuration (/etc),
// the files in a user's home, hidden and nested included (/home), and the most frequent user of an app's
// list (/srv). The answer is read off the real output of the solver's query when the instance is made.
//
// # Shell
//
// cat, cd, echo, find (-name, -type), grep (-c, -i, -v, -l, -n, -E), head and tail (-n), ls (-l, -a),
// pwd, sort (-n, -r, -u), uniq (-c) and wc (-l, -w, -c), joined by pipes, with quotes and globs, over a
// read-only filesystem; errors read as GNU's do. Redirection, ';', '&&', '||', '&', subshells, variables
// and command substitution are refused with an observation that says so, as are other commands.
//
// # Admissible calls
//
// For the built-in policy, which scores listed calls by their words: ls of the working directory and of
// each base directory; for the entries the last ls printed, ls and a file count for directories and a
// few per-kind commands for files (grep -c of each level for a log, grep of each key, cat and wc -c for a
// configuration, sort | uniq -c pipelines and wc -l for a list); answer_action with the values of the
// last two outputs (the latest first, at most 6), so the right answer is listed only once the command
// that prints it has run; and finish_action. Paths are relative to the working directory, which keeps a
// candidate's words few: the right query is then the one sharing most words with the question (its
// service, level, key or list), a relation the policy learns once and applies to unseen instances.
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
