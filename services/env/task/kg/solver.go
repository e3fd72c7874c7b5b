package kg

import (
	"slices"
	"strconv"

	"github.com/jetrl/jetrl/proto"
)

// Solve is the scripted expert: it runs the question's hidden program, reusing every variable that
// already holds a step's result, fetching relations and attributes before it uses them, and answers with
// the variable that holds the program's result.
func (gm *game) Solve() proto.ToolCall {
	if gm.done {
		return callOf(toolGetRelations, "variable", gm.g.ents[gm.q.entities[0]].name)
	}
	vals := make([]value, len(gm.q.program))
	have := make([]int, len(gm.q.program)) // latest variable holding each step's result, or -1
	for i := range gm.q.program {
		vals[i] = gm.run(gm.q.program[:i+1])
		have[i] = -1
		for k := len(gm.vars) - 1; k >= 0; k-- {
			if gm.vars[k].equal(vals[i]) {
				have[i] = k
				break
			}
		}
	}
	if k := have[len(have)-1]; k >= 0 {
		return callOf(toolAnswer, "variable", "#"+strconv.Itoa(k))
	}
	i := slices.Index(have, -1)
	st := gm.q.program[i]
	ref := func(o operand) string {
		if o.entity {
			return gm.g.ents[o.id].name
		}
		return "#" + strconv.Itoa(have[o.id])
	}
	a := ref(st.a)
	switch st.op {
	case opNeighbors:
		if !slices.Contains(gm.rels[a], st.name) {
			return callOf(toolGetRelations, "variable", a)
		}
		return callOf(toolGetNeighbors, "variable", a, "relation", st.name)
	case opIntersect:
		return callOf(toolIntersection, "variable1", a, "variable2", ref(st.b))
	case opArgmax, opArgmin:
		if !gm.attrs[a] {
			return callOf(toolGetAttributes, "variable", a)
		}
		tool := toolArgmax
		if st.op == opArgmin {
			tool = toolArgmin
		}
		return callOf(tool, "variable", a, "attribute", st.name)
	}
	return callOf(toolCount, "variable", a)
}
