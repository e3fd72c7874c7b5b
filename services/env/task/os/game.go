package os

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// Admissible-list bounds: answer candidates come from the latest outputs, the newest first.
const (
	maxAnswers       = 6
	maxLatestAnswers = 5
	maxValueLen      = 40
)

// game is one instance: the filesystem, the question and what the agent has seen. Every instance owns
// all of its state.
type game struct {
	fs          *fsys
	sh          shell
	q           question
	instruction string
	openObs     string
	// focus is the directory the last successful ls printed; the admissible commands act on its entries.
	focus string
	// recent holds the standard output of the last two commands that ran, the latest first.
	recent  [2]string
	done    bool
	reward  float64
	opening task.Opening
}

func (g *game) open() task.Opening {
	return task.Opening{Instruction: g.instruction, Observation: g.openObs, Admissible: g.admissible()}
}

// Start returns the opening; the slices are the caller's own.
func (g *game) Start() task.Opening {
	o := g.opening
	o.Admissible = slices.Clone(o.Admissible)
	return o
}

// Step applies one call; bad calls and refused scripts explain themselves and cost only the turn.
func (g *game) Step(call proto.ToolCall) task.Result {
	if g.done {
		return task.Result{Observation: "The episode is over.", Done: true, Reward: g.reward, Status: proto.StatusCompleted}
	}
	switch call.Name {
	case BashTool:
		script, err := stringArg(call, "script", false)
		if err != nil {
			return g.running(err.Error(), true)
		}
		r, err := g.sh.run(script)
		if err != nil {
			return g.running(err.Error(), true)
		}
		if g.sh.listed != "" {
			g.focus = g.sh.listed
		}
		g.recent = [2]string{r.stdout, g.recent[0]}
		return g.running(render(r), false)
	case AnswerTool:
		ans, err := stringArg(call, "answer", true)
		if err != nil {
			return g.running(err.Error(), true)
		}
		g.done = true
		if sameAnswer(ans, g.q.answer) {
			g.reward = 1
			return task.Result{Observation: fmt.Sprintf("Your answer %q is correct.", ans), Done: true, Reward: 1, Status: proto.StatusCompleted}
		}
		return task.Result{Observation: fmt.Sprintf("Your answer %q is wrong.", ans), Done: true, Status: proto.StatusCompleted}
	case FinishTool:
		if err := noArgs(call); err != nil {
			return g.running(err.Error(), true)
		}
		g.done = true
		return task.Result{Observation: "You finished without answering.", Done: true, Status: proto.StatusCompleted}
	}
	return g.running(fmt.Sprintf("unknown tool %q; available: %s, %s, %s", call.Name, BashTool, AnswerTool, FinishTool), true)
}

func (g *game) running(obs string, invalid bool) task.Result {
	r := task.Result{Observation: obs, Admissible: g.admissible(), Status: proto.StatusRunning}
	if invalid {
		r.Metrics = map[string]float64{"invalid_call": 1}
	}
	return r
}

// objectArgs parses a call's arguments as a JSON object; "" reads as {} for tools without parameters.
func objectArgs(call proto.ToolCall, example string) (map[string]json.RawMessage, error) {
	raw := strings.TrimSpace(call.Arguments)
	if raw == "" {
		raw = "{}"
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &args); err != nil || args == nil {
		return nil, fmt.Errorf("bad arguments: not a JSON object (%v); want %s", err, example)
	}
	return args, nil
}

// stringArg extracts the one string argument of a call, or says what is wrong; a number is accepted
// for an answer, which models often send unquoted.
func stringArg(call proto.ToolCall, name string, numberOK bool) (string, error) {
	example := fmt.Sprintf(`{%q: "..."}`, name)
	args, err := objectArgs(call, example)
	if err != nil {
		return "", err
	}
	for k := range args {
		if k != name {
			return "", fmt.Errorf("bad arguments: unknown argument %q; %s takes only %q", k, call.Name, name)
		}
	}
	v, ok := args[name]
	if !ok {
		return "", fmt.Errorf("bad arguments: missing required %q; want %s", name, example)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		var n json.Number
		if !numberOK || json.Unmarshal(v, &n) != nil {
			return "", fmt.Errorf("bad arguments: %q must be a string, got %s", name, v)
		}
		s = n.String()
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("bad arguments: %q is empty", name)
	}
	return s, nil
}

// noArgs checks that a call without parameters got none.
func noArgs(call proto.ToolCall) error {
	args, err := objectArgs(call, "{}")
	if err != nil {
		return err
	}
	for k := range args {
		return fmt.Errorf("bad arguments: unknown argument %q; %s takes none", k, call.Name)
	}
	return nil
}

// normAnswer forgives case, surrounding space, quotes and a final period.
func normAnswer(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, ".")
	return strings.Trim(s, "\"'` ")
}

// sameAnswer compares answers as text, or as numbers when both are ("42" equals "42.0").
func sameAnswer(got, want string) bool {
	a, b := normAnswer(got), normAnswer(want)
	if a == b {
		return true
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}

// isPerm reports whether a token is an ls -l mode string such as "-rw-r--r--".
func isPerm(t string) bool {
	return len(t) == 10 && strings.IndexByte("-dl", t[0]) >= 0 && strings.Trim(t[1:], "rwx-") == ""
}

// valueTokens are the words and numbers of an output that could be an answer, in order, without repeats.
func valueTokens(out string) []string {
	var toks []string
	for _, f := range strings.Fields(out) {
		t := strings.Trim(f, "\"'`,;:()[]{}=<>")
		if t == "" || len(t) > maxValueLen || isPerm(t) || strings.IndexFunc(t, isAlnum) < 0 || slices.Contains(toks, t) {
			continue
		}
		toks = append(toks, t)
	}
	return toks
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// answers are the answer candidates: values of the latest output first, then of the one before.
func (g *game) answers() []string {
	out := valueTokens(g.recent[0])
	out = out[:min(len(out), maxLatestAnswers)]
	for _, t := range valueTokens(g.recent[1]) {
		if len(out) >= maxAnswers {
			break
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// fileScripts are the useful commands on one file, by what it holds.
func fileScripts(p string, n *node) []string {
	switch n.kind {
	case kindLog:
		out := make([]string, 0, 5)
		for _, l := range levels() {
			out = append(out, fmt.Sprintf("grep -c %s %s", l, p))
		}
		return append(out, "wc -l "+p)
	case kindConf:
		out := make([]string, 0, len(n.keys)+2)
		for _, k := range n.keys {
			out = append(out, fmt.Sprintf("grep %s %s", k, p))
		}
		return append(out, "cat "+p, "wc -c "+p)
	case kindList:
		// no head or tail here: a glimpse of a few names wins now and then and traps a learner there
		return []string{fmt.Sprintf(topFmt, p), fmt.Sprintf("sort %s | uniq -c", p), fmt.Sprintf("sort %s | uniq -c | sort -n | head -n 1", p), "wc -l " + p}
	}
	return []string{"cat " + p, "wc -c " + p}
}

// rel renders an absolute path as an agent in the working directory would type it: relative below the
// working directory, absolute elsewhere. Short paths keep the words that tell candidates apart few.
func (g *game) rel(p string) string {
	cwd := g.sh.cwd
	if cwd != "/" && strings.HasPrefix(p, cwd+"/") {
		return p[len(cwd)+1:]
	}
	return p
}

// lsScript lists a directory: a bare ls for the working directory.
func (g *game) lsScript(dir string) string {
	if dir == g.sh.cwd {
		return "ls"
	}
	return "ls " + g.rel(dir)
}

// query is the solver's query as the admissible list renders it from the working directory.
func (g *game) query() string { return fmt.Sprintf(g.q.queryFmt, g.rel(g.q.target)) }

// scripts are the admissible shell commands: ls of the working directory and of every base directory,
// and commands on the entries the last listing showed (ls and a file count for directories, per-kind
// commands for files).
func (g *game) scripts() []string {
	out := make([]string, 0, 24)
	out = append(out, "ls")
	for _, b := range bases() {
		out = append(out, g.lsScript(b))
	}
	d := g.fs.lookup(g.focus)
	if g.focus == "" || d == nil || !d.dir {
		return compact(out)
	}
	if parent := path.Dir(g.focus); parent != "/" && !slices.Contains(bases(), parent) && !slices.Contains(bases(), g.focus) {
		out = append(out, g.lsScript(parent))
	}
	files := false
	for _, c := range d.visible() {
		p := g.rel(path.Join(g.focus, c.name))
		if c.dir {
			out = append(out, "ls "+p, fmt.Sprintf(countFmt, p))
			continue
		}
		files = true
		out = append(out, fileScripts(p, c)...)
	}
	if files {
		out = append(out, strings.TrimSuffix("ls -l "+g.rel(g.focus), " "+g.sh.cwd)) // "ls -l" for the working directory
	}
	return compact(out)
}

// compact drops repeated scripts, keeping the first.
func compact(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// admissible renders the scripts, the answer candidates and finish_action as calls.
func (g *game) admissible() []proto.ToolCall {
	scripts, answers := g.scripts(), g.answers()
	out := make([]proto.ToolCall, 0, len(scripts)+len(answers)+1)
	for _, s := range scripts {
		out = append(out, bashCall(s))
	}
	for _, a := range answers {
		out = append(out, answerCall(a))
	}
	return append(out, proto.ToolCall{Name: FinishTool, Arguments: "{}"})
}

func bashCall(script string) proto.ToolCall {
	b, _ := json.Marshal(struct {
		Script string `json:"script"`
	}{script}) // a struct of one string always marshals
	return proto.ToolCall{Name: BashTool, Arguments: string(b)}
}

func answerCall(answer string) proto.ToolCall {
	b, _ := json.Marshal(struct {
		Answer string `json:"answer"`
	}{answer}) // a struct of one string always marshals
	return proto.ToolCall{Name: AnswerTool, Arguments: string(b)}
}
