package os

import (
	"path"
	"slices"

	"github.com/jetrl/jetrl/proto"
)

// Solve is the scripted expert: answer once the answer is admissible, else run the query once its
// directory is the focus, else list the way there (the query's directory, or its parent first).
func (g *game) Solve() proto.ToolCall {
	if g.done || slices.Contains(g.answers(), g.q.answer) {
		return answerCall(g.q.answer)
	}
	scripts := g.scripts()
	if q := g.query(); g.focus == g.q.queryDir && slices.Contains(scripts, q) {
		return bashCall(q)
	}
	if ls := g.lsScript(g.q.queryDir); slices.Contains(scripts, ls) {
		return bashCall(ls)
	}
	return bashCall(g.lsScript(path.Dir(g.q.queryDir)))
}
