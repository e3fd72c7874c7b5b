package kg

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// recentVars is how many of the latest variables the admissible list offers calls on; older ones stay
// usable but unlisted, which keeps the list short.
const recentVars = 2

// maxShown caps the members an observation lists.
const maxShown = 8

// game is one instance: the graph, the question and the agent's variables. It owns all of its state.
type game struct {
	s       *schema
	g       *graph
	q       question
	gold    value
	vars    []value
	rels    map[string][]string // relations that get_relations revealed, per entity name or "#k"
	attrs   map[string]bool     // variables whose attributes get_attributes revealed
	done    bool
	final   task.Result
	opening task.Opening
}

func newGame(g *graph, q question) *game {
	gm := &game{s: g.s, g: g, q: q, rels: map[string][]string{}, attrs: map[string]bool{}}
	gm.gold = gm.run(q.program)
	gm.opening = task.Opening{
		Instruction: q.instruction,
		Observation: fmt.Sprintf("Query the knowledge base with the tools. Each call that returns entities or a number "+
			"stores it in a new variable (#0, #1, ...) that later calls can use; the entities of the question can be used "+
			"by name. Call answer with the variable that holds the answer. You have %d calls.", MaxTurns),
		Admissible: gm.admissible(),
	}
	return gm
}

// fresh returns a new game of gm's instance, as generated: it shares the graph, the question, the gold
// answer and the opening, which play only reads (every value a call computes is a new set), and has
// its own variables, revealed relations and attributes, and end.
func (gm *game) fresh() *game {
	return &game{s: gm.s, g: gm.g, q: gm.q, gold: gm.gold, rels: map[string][]string{}, attrs: map[string]bool{}, opening: gm.opening}
}

// run evaluates a program and returns its last result.
func (gm *game) run(prog []step) value {
	vals := make([]value, len(prog))
	arg := func(o operand) value {
		if o.entity {
			return gm.g.single(o.id)
		}
		return vals[o.id]
	}
	for i, st := range prog {
		a := arg(st.a)
		switch st.op {
		case opNeighbors:
			vals[i] = gm.g.neighbors(a, st.name)
		case opIntersect:
			vals[i] = intersect(a, arg(st.b))
		case opArgmax, opArgmin:
			vals[i] = gm.g.extreme(a, gm.g.attrIndex(a.typ, st.name), st.op == opArgmax)
		case opCount:
			vals[i] = value{isNum: true, num: len(a.set)}
		}
	}
	return vals[len(vals)-1]
}

// Start returns the opening; the slices are the caller's own.
func (gm *game) Start() task.Opening {
	o := gm.opening
	o.Admissible = slices.Clone(o.Admissible)
	return o
}

// Step applies one call; a bad call explains itself and changes nothing.
func (gm *game) Step(call proto.ToolCall) task.Result {
	if gm.done {
		return gm.final
	}
	obs, err := gm.apply(call)
	if err != nil {
		return task.Result{Observation: err.Error(), Admissible: gm.admissible(), Status: proto.StatusRunning,
			Metrics: map[string]float64{"invalid_call": 1}}
	}
	if gm.done {
		return gm.final
	}
	return task.Result{Observation: obs, Admissible: gm.admissible(), Status: proto.StatusRunning}
}

// invalid reports a well-formed call that names something that does not fit.
func invalid(format string, a ...any) error {
	return errors.New("invalid argument: " + fmt.Sprintf(format, a...))
}

// maxEcho caps how much of an agent's argument an error observation repeats.
const maxEcho = 60

// clip shortens an agent's text for echoing it in an observation.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return strings.ToValidUTF8(s[:maxEcho], "") + "..."
}

// apply carries out one call and returns its observation, or an error that says what is wrong with it.
func (gm *game) apply(call proto.ToolCall) (string, error) {
	i, ok := gm.s.toolIndex[call.Name]
	if !ok {
		return "", fmt.Errorf("unknown tool %q; the tools are %s", clip(call.Name), strings.Join(gm.s.toolNames(), ", "))
	}
	args, err := parseArgs(call.Arguments, gm.s.tools[i].args)
	if err != nil {
		return "", fmt.Errorf("bad arguments for %s: %w", call.Name, err)
	}
	switch call.Name {
	case toolGetRelations:
		v, label, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		rels := gm.g.relationsOf(v)
		gm.rels[label] = rels
		if len(rels) == 0 {
			return fmt.Sprintf("%s has no relations.", label), nil
		}
		return fmt.Sprintf("Relations of %s: %s.", label, strings.Join(rels, ", ")), nil
	case toolGetNeighbors:
		v, label, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		rel := strings.TrimSpace(args[1])
		if !slices.Contains(gm.g.relationsOf(v), rel) {
			return "", invalid("%s has no relation %q; get_relations(%s) lists its relations", label, clip(rel), label)
		}
		return gm.newVar(gm.g.neighbors(v, rel), ""), nil
	case toolIntersection:
		a, la, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		b, lb, err := gm.resolveSet(args[1])
		if err != nil {
			return "", err
		}
		if a.typ != b.typ {
			return "", invalid("%s holds %s and %s holds %s; intersection needs two sets of one type", la, plural(a.typ), lb, plural(b.typ))
		}
		return gm.newVar(intersect(a, b), ""), nil
	case toolGetAttributes:
		v, label, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		gm.attrs[label] = true
		names := make([]string, 0, len(gm.s.attrsOf[v.typ]))
		for _, a := range gm.s.attrsOf[v.typ] {
			names = append(names, a.name)
		}
		return fmt.Sprintf("Attributes of %s: %s.", label, strings.Join(names, ", ")), nil
	case toolArgmax, toolArgmin:
		v, label, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		name := strings.TrimSpace(args[1])
		a := gm.g.attrIndex(v.typ, name)
		switch {
		case a < 0:
			return "", invalid("%s (%s) has no attribute %q; get_attributes(%s) lists its attributes", label, plural(v.typ), clip(name), label)
		case len(v.set) == 0:
			return "", invalid("%s is empty", label)
		}
		best := gm.g.extreme(v, a, call.Name == toolArgmax)
		at := gm.s.attrsOf[v.typ][a]
		return gm.newVar(best, fmt.Sprintf(" (%s %d%s)", at.name, gm.g.ents[best.set[0]].attrs[a], unitSuffix(at.unit))), nil
	case toolCount:
		v, _, err := gm.resolveSet(args[0])
		if err != nil {
			return "", err
		}
		return gm.newVar(value{isNum: true, num: len(v.set)}, ""), nil
	case toolAnswer:
		k, err := gm.varIndex(args[0])
		if err != nil {
			return "", err
		}
		gm.done = true
		gm.final = task.Result{Done: true, Status: proto.StatusCompleted}
		if gm.vars[k].equal(gm.gold) {
			gm.final.Reward = 1
			gm.final.Observation = fmt.Sprintf("Final answer #%d: correct.", k)
		} else {
			gm.final.Observation = fmt.Sprintf("Final answer #%d: wrong.", k)
		}
		return gm.final.Observation, nil
	}
	return "", fmt.Errorf("unknown tool %q", clip(call.Name)) // unreachable: every listed tool has a case
}

func unitSuffix(unit string) string {
	if unit == "" {
		return ""
	}
	return " " + unit
}

// newVar stores v as the next variable and describes it, as AgentBench does, with its members.
func (gm *game) newVar(v value, note string) string {
	gm.vars = append(gm.vars, v)
	k := len(gm.vars) - 1
	if v.isNum {
		return fmt.Sprintf("Variable #%d, which is a number: %d.", k, v.num)
	}
	names := make([]string, 0, min(len(v.set), maxShown))
	for _, id := range v.set[:min(len(v.set), maxShown)] {
		names = append(names, gm.g.ents[id].name)
	}
	list := strings.Join(names, ", ")
	switch {
	case len(v.set) == 0:
		list = "none"
	case len(v.set) > maxShown:
		list += fmt.Sprintf(" and %d more", len(v.set)-maxShown)
	}
	return fmt.Sprintf("Variable #%d, which are instances of %s: %s%s.", k, v.typ, list, note)
}

// varIndex parses "#k" naming an existing variable.
func (gm *game) varIndex(arg string) (int, error) {
	t := strings.TrimSpace(arg)
	rest, ok := strings.CutPrefix(t, "#")
	if !ok {
		return 0, invalid("%q is not a variable; variables are written #0, #1, ...", clip(t))
	}
	k, err := strconv.Atoi(rest)
	switch {
	case err != nil || k < 0:
		return 0, invalid("%q is not a variable; variables are written #0, #1, ...", clip(t))
	case len(gm.vars) == 0:
		return 0, invalid("there is no variable %s yet; no call has made a variable", clip(t))
	case k >= len(gm.vars):
		return 0, invalid("there is no variable %s; the variables are #0 to #%d", clip(t), len(gm.vars)-1)
	}
	return k, nil
}

// resolveSet reads a variable or entity argument that must hold entities; label is how observations name it.
func (gm *game) resolveSet(arg string) (value, string, error) {
	t := strings.TrimSpace(arg)
	if strings.HasPrefix(t, "#") {
		k, err := gm.varIndex(t)
		if err != nil {
			return value{}, "", err
		}
		if gm.vars[k].isNum {
			return value{}, "", invalid("#%d is a number, not a set of entities", k)
		}
		return gm.vars[k], "#" + strconv.Itoa(k), nil
	}
	id, ok := gm.g.byName[normName(t)]
	if !ok {
		return value{}, "", invalid("%q is neither a variable (#0, #1, ...) nor an entity of the knowledge base", clip(t))
	}
	return gm.g.single(id), gm.g.ents[id].name, nil
}

// parseArgs reads a JSON object with exactly the named string arguments, in that order.
func parseArgs(raw string, names []string) ([]string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("empty; want a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object (%v)", err)
	}
	for k := range m {
		if !slices.Contains(names, k) {
			return nil, fmt.Errorf("unknown argument %q; this tool takes %s", clip(k), strings.Join(names, ", "))
		}
	}
	out := make([]string, len(names))
	for i, n := range names {
		v, ok := m[n]
		if !ok {
			return nil, fmt.Errorf("missing required %q", n)
		}
		if err := json.Unmarshal(v, &out[i]); err != nil || len(v) == 0 || v[0] != '"' { // null would leave "" silently
			return nil, fmt.Errorf("%q must be a string, got %s", n, clip(string(v)))
		}
		if strings.TrimSpace(out[i]) == "" {
			return nil, fmt.Errorf("%q is empty", n)
		}
	}
	return out, nil
}

// callOf builds a call from alternating argument names and values.
func callOf(tool string, kv ...string) proto.ToolCall {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m) // a map of strings always marshals, with sorted keys
	return proto.ToolCall{Name: tool, Arguments: string(b)}
}

// admissible lists the calls that make sense now: get_relations on the question's entities and the
// latest variables, get_neighbors along relations get_relations revealed, intersections of the latest
// variables, and on the latest variables of the type the question asks about: attributes, and argmax
// (argmin) along revealed attributes, if it asks for the highest (lowest); counts if it asks how many;
// and answers (a number for "how many").
func (gm *game) admissible() []proto.ToolCall {
	var out []proto.ToolCall
	add := func(c proto.ToolCall) {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	var refs []string // entity names and labels of the latest set variables
	for _, e := range gm.q.entities {
		refs = append(refs, gm.g.ents[e].name)
	}
	first := max(0, len(gm.vars)-recentVars)
	var sets []int
	for k := first; k < len(gm.vars); k++ {
		if !gm.vars[k].isNum {
			sets = append(sets, k)
			refs = append(refs, label(k))
		}
	}
	for _, r := range refs {
		add(callOf(toolGetRelations, "variable", r))
	}
	for _, r := range refs {
		for _, rel := range gm.rels[r] {
			add(callOf(toolGetNeighbors, "variable", r, "relation", rel))
		}
	}
	for i, a := range sets {
		for _, b := range sets[i+1:] {
			if gm.vars[a].typ == gm.vars[b].typ {
				add(callOf(toolIntersection, "variable1", label(a), "variable2", label(b)))
			}
		}
	}
	for _, k := range sets {
		if len(gm.vars[k].set) == 0 || gm.vars[k].typ != gm.q.typ {
			continue
		}
		if gm.q.extreme != "" {
			add(callOf(toolGetAttributes, "variable", label(k)))
		}
		if gm.q.extreme != "" && gm.attrs[label(k)] {
			for _, a := range gm.s.attrsOf[gm.vars[k].typ] {
				add(callOf(gm.q.extreme, "variable", label(k), "attribute", a.name))
			}
		}
		if gm.q.asksCount {
			add(callOf(toolCount, "variable", label(k)))
		}
	}
	for k := first; k < len(gm.vars); k++ {
		if v := gm.vars[k]; v.isNum == gm.q.asksCount && (v.isNum || v.typ == gm.q.typ) {
			add(callOf(toolAnswer, "variable", label(k)))
		}
	}
	return out
}

// label names variable k in calls and observations.
func label(k int) string { return "#" + strconv.Itoa(k) }
