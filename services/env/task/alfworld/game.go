package alfworld

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// recep is one receptacle of the room.
type recep struct {
	name, kind     string
	openable, open bool
	contents       []int // object indices, in the order they arrived
}

// object is one object of the room.
type object struct {
	name, kind       string
	at               int // receptacle index, or -1 while carried
	clean, hot, cool bool
	fixed            bool // the desklamp: seen and used, never carried
}

// game is one instance: the room, the goal and the agent's state. Every instance owns all of its state.
type game struct {
	kind               kind
	scene              scene
	goalObj, goalRecep string
	receps             []recep
	objs               []object
	recepIndex         map[string]int
	objIndex           map[string]int
	loc                int // receptacle the agent stands at, or -1 in the middle of the room
	held               int // carried object, or -1
	lamp               int // the desklamp's object index, or -1 when the room has none
	lampOn             bool
	done               bool
	opening            task.Opening
}

// verb is an action's kind.
type verb int

const (
	vLook verb = iota
	vInventory
	vGoTo
	vOpen
	vClose
	vTake
	vPut
	vClean
	vHeat
	vCool
	vUse
	vExamineRecep
	vExamineObj
)

// action is one admissible action and its text, the string an agent sends.
type action struct {
	verb     verb
	obj, rec int
	text     string
}

// instruction states the goal in ALFWorld's words.
func (g *game) instruction() string {
	if g.kind == lookAtObjInLight {
		return fmt.Sprintf("Your task is to: examine the %s with the desklamp.", g.goalObj)
	}
	if adj := g.kind.adjective(); adj != "" {
		return fmt.Sprintf("Your task is to: put a %s %s in %s.", adj, g.goalObj, g.goalRecep)
	}
	return fmt.Sprintf("Your task is to: put a %s in %s.", g.goalObj, g.goalRecep)
}

// roomView is what the agent sees from the middle of the room: the receptacles, not their contents.
func (g *game) roomView() string {
	names := make([]string, len(g.receps))
	for i, r := range g.receps {
		names[i] = r.name
	}
	return "You are in the middle of a room. Looking quickly around you, you see " + seeList(names) + "."
}

func (g *game) open() task.Opening {
	return task.Opening{Instruction: g.instruction(), Observation: g.roomView(), Admissible: calls(g.admissible())}
}

// Start returns the opening; the slices are the caller's own.
func (g *game) Start() task.Opening {
	o := g.opening
	o.Admissible = slices.Clone(o.Admissible)
	return o
}

// Step applies one call; bad calls and inadmissible actions explain themselves and cost only the turn.
func (g *game) Step(call proto.ToolCall) task.Result {
	if g.done {
		return task.Result{Observation: "The task is already complete.", Done: true, Reward: 1, Status: proto.StatusCompleted}
	}
	text, err := parseCall(call)
	if err != nil {
		return g.running(err.Error(), true)
	}
	norm := normalize(text)
	for _, a := range g.admissible() {
		if a.text == norm {
			obs := g.apply(a)
			if g.satisfied() {
				g.done = true
				return task.Result{Observation: obs, Done: true, Reward: 1, Status: proto.StatusCompleted}
			}
			return g.running(obs, false)
		}
	}
	return g.running(fmt.Sprintf("%q is not admissible here: %s. Nothing happens.", text, g.why(norm)), true)
}

func (g *game) running(obs string, invalid bool) task.Result {
	r := task.Result{Observation: obs, Admissible: calls(g.admissible()), Status: proto.StatusRunning}
	if invalid {
		r.Metrics = map[string]float64{"invalid_call": 1}
	}
	return r
}

// parseCall extracts the action string of a take_action call, or says what is wrong with the call.
func parseCall(call proto.ToolCall) (string, error) {
	if call.Name != ToolName {
		return "", fmt.Errorf("unknown tool %q; available: %s", call.Name, ToolName)
	}
	raw := strings.TrimSpace(call.Arguments)
	if raw == "" {
		return "", fmt.Errorf(`bad arguments: empty; want a JSON object like {"action": "look"}`)
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &args); err != nil || args == nil {
		return "", fmt.Errorf(`bad arguments: not a JSON object (%v); want {"action": "..."}`, err)
	}
	v, ok := args["action"]
	if !ok {
		return "", fmt.Errorf(`bad arguments: missing required "action"`)
	}
	for k := range args {
		if k != "action" {
			return "", fmt.Errorf(`bad arguments: unknown argument %q; %s takes only "action"`, k, ToolName)
		}
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf(`bad arguments: "action" must be a string, got %s`, v)
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf(`bad arguments: "action" is empty`)
	}
	return s, nil
}

// normalize forgives case, spacing and "in" or "on" for "in/on", which agents commonly vary.
func normalize(s string) string {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	if strings.HasPrefix(s, "put ") && !strings.Contains(s, " in/on ") {
		if i := strings.LastIndex(s, " in "); i > 0 {
			s = s[:i] + " in/on " + s[i+len(" in "):]
		} else if i := strings.LastIndex(s, " on "); i > 0 {
			s = s[:i] + " in/on " + s[i+len(" on "):]
		}
	}
	return s
}

// calls renders actions as take_action calls.
func calls(as []action) []proto.ToolCall {
	out := make([]proto.ToolCall, len(as))
	for i, a := range as {
		out[i] = callOf(a.text)
	}
	return out
}

// callOf is the take_action call of one action string.
func callOf(text string) proto.ToolCall {
	b, _ := json.Marshal(struct {
		Action string `json:"action"`
	}{text}) // a struct of one string always marshals
	return proto.ToolCall{Name: ToolName, Arguments: string(b)}
}

// admissible lists the actions that do something now, in a stable order.
func (g *game) admissible() []action {
	as := []action{{verb: vLook, text: "look"}, {verb: vInventory, text: "inventory"}}
	for i, r := range g.receps {
		if i != g.loc {
			as = append(as, action{verb: vGoTo, rec: i, text: "go to " + r.name})
		}
	}
	if g.loc < 0 {
		return as
	}
	r := &g.receps[g.loc]
	if r.openable && !r.open {
		as = append(as, action{verb: vOpen, rec: g.loc, text: "open " + r.name})
	}
	if r.openable && r.open {
		as = append(as, action{verb: vClose, rec: g.loc, text: "close " + r.name})
	}
	reachable := !r.openable || r.open
	if reachable && g.held < 0 {
		for _, o := range r.contents {
			if !g.objs[o].fixed {
				as = append(as, action{verb: vTake, obj: o, rec: g.loc, text: fmt.Sprintf("take %s from %s", g.objs[o].name, r.name)})
			}
		}
	}
	if g.held >= 0 {
		h := g.objs[g.held].name
		if reachable {
			as = append(as, action{verb: vPut, obj: g.held, rec: g.loc, text: fmt.Sprintf("put %s in/on %s", h, r.name)})
		}
		switch r.kind {
		case sinkbasin:
			as = append(as, action{verb: vClean, obj: g.held, rec: g.loc, text: fmt.Sprintf("clean %s with %s", h, r.name)})
		case microwave:
			as = append(as, action{verb: vHeat, obj: g.held, rec: g.loc, text: fmt.Sprintf("heat %s with %s", h, r.name)})
		case fridge:
			as = append(as, action{verb: vCool, obj: g.held, rec: g.loc, text: fmt.Sprintf("cool %s with %s", h, r.name)})
		}
	}
	if g.lamp >= 0 && g.objs[g.lamp].at == g.loc && !g.lampOn {
		as = append(as, action{verb: vUse, obj: g.lamp, text: "use " + g.objs[g.lamp].name})
	}
	as = append(as, action{verb: vExamineRecep, rec: g.loc, text: "examine " + r.name})
	if g.held >= 0 {
		as = append(as, action{verb: vExamineObj, obj: g.held, text: "examine " + g.objs[g.held].name})
	}
	return as
}

// apply carries out an admissible action and returns the observation.
func (g *game) apply(a action) string {
	switch a.verb {
	case vLook:
		if g.loc < 0 {
			return g.roomView()
		}
		return fmt.Sprintf("You are facing the %s. %s", g.receps[g.loc].name, g.describe(g.loc))
	case vInventory:
		if g.held < 0 {
			return "You are not carrying anything."
		}
		return fmt.Sprintf("You are carrying: a %s.", g.objs[g.held].name)
	case vGoTo:
		g.loc = a.rec
		return fmt.Sprintf("You arrive at %s. %s", g.receps[a.rec].name, g.describe(a.rec))
	case vOpen:
		g.receps[a.rec].open = true
		return fmt.Sprintf("You open the %s. %s", g.receps[a.rec].name, g.describe(a.rec))
	case vClose:
		g.receps[a.rec].open = false
		return fmt.Sprintf("You close the %s.", g.receps[a.rec].name)
	case vTake:
		r := &g.receps[a.rec]
		r.contents = slices.DeleteFunc(r.contents, func(o int) bool { return o == a.obj })
		g.objs[a.obj].at, g.held = -1, a.obj
		return fmt.Sprintf("You pick up the %s from the %s.", g.objs[a.obj].name, r.name)
	case vPut:
		r := &g.receps[a.rec]
		r.contents = append(r.contents, a.obj)
		g.objs[a.obj].at, g.held = a.rec, -1
		return fmt.Sprintf("You put the %s in/on the %s.", g.objs[a.obj].name, r.name)
	case vClean:
		g.objs[a.obj].clean = true
		return fmt.Sprintf("You clean the %s using the %s.", g.objs[a.obj].name, g.receps[a.rec].name)
	case vHeat:
		g.objs[a.obj].hot, g.objs[a.obj].cool = true, false
		return fmt.Sprintf("You heat the %s using the %s.", g.objs[a.obj].name, g.receps[a.rec].name)
	case vCool:
		g.objs[a.obj].cool, g.objs[a.obj].hot = true, false
		return fmt.Sprintf("You cool the %s using the %s.", g.objs[a.obj].name, g.receps[a.rec].name)
	case vUse:
		g.lampOn = true
		return fmt.Sprintf("You turn on the %s.", g.objs[a.obj].name)
	case vExamineRecep:
		return g.describe(a.rec)
	case vExamineObj:
		o := g.objs[a.obj]
		var states []string
		for _, s := range []struct {
			on   bool
			word string
		}{{o.clean, "clean"}, {o.hot, "hot"}, {o.cool, "cool"}} {
			if s.on {
				states = append(states, s.word)
			}
		}
		if len(states) == 0 {
			return fmt.Sprintf("There's nothing special about %s.", o.name)
		}
		return fmt.Sprintf("The %s is %s.", o.name, strings.Join(states, " and "))
	}
	return "Nothing happens."
}

// describe says what the agent sees at a receptacle, as ALFWorld does.
func (g *game) describe(r int) string {
	rc := g.receps[r]
	if rc.openable && !rc.open {
		return fmt.Sprintf("The %s is closed.", rc.name)
	}
	names := make([]string, len(rc.contents))
	for i, o := range rc.contents {
		names[i] = g.objs[o].name
	}
	if rc.openable {
		return fmt.Sprintf("The %s is open. In it, you see %s.", rc.name, seeList(names))
	}
	return fmt.Sprintf("On the %s, you see %s.", rc.name, seeList(names))
}

// seeList renders names as ALFWorld does: "a apple 1, a knife 1, and a mug 2", or "nothing".
func seeList(names []string) string {
	switch len(names) {
	case 0:
		return "nothing"
	case 1:
		return "a " + names[0]
	}
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == len(names)-1 {
			b.WriteString("and ")
		}
		b.WriteString("a " + n)
	}
	return b.String()
}

// satisfied reports whether the goal holds.
func (g *game) satisfied() bool {
	if g.kind == lookAtObjInLight {
		return g.lampOn && g.held >= 0 && g.objs[g.held].kind == g.goalObj && g.loc == g.objs[g.lamp].at
	}
	for _, o := range g.objs {
		if o.kind == g.goalObj && o.at >= 0 && g.receps[o.at].kind == g.goalRecep && g.ready(o) {
			return true
		}
	}
	return false
}

// ready reports whether an object has the state the task asks for.
func (g *game) ready(o object) bool {
	switch g.kind {
	case pickCleanThenPlace:
		return o.clean
	case pickHeatThenPlace:
		return o.hot
	case pickCoolThenPlace:
		return o.cool
	}
	return true
}
