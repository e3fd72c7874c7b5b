package db

import "github.com/jetrl/jetrl/proto"

// Solve is the scripted expert: look at the asked table, run the right statement (it knows which from
// the hidden goal; for a two-step question, after the query that reveals its condition value), then
// commit what the query returned, or "done" after the change.
func (g *game) Solve() proto.ToolCall {
	t := g.goal.table
	switch {
	case g.done:
		return commitCall("done")
	case !g.explored[t]:
		return sqlCall(g.explores[t])
	case g.goal.kind.mutation() && g.rightApplied:
		return commitCall("done")
	case !g.goal.kind.mutation() && g.rightSeen != "":
		return commitCall(g.rightSeen)
	case g.goal.first != "" && !g.firstSeen:
		return sqlCall(g.goal.first)
	}
	return sqlCall(g.goal.right)
}
