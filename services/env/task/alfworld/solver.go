package alfworld

import "github.com/jetrl/jetrl/proto"

// Solve is the scripted expert: from any state it takes the next step of a shortest plan it can see
// with the hidden placements (fetch the cheapest goal object, change it, put it in the nearest goal receptacle).
func (g *game) Solve() proto.ToolCall {
	return callOf(g.next())
}

func (g *game) next() string {
	if g.done {
		return "look"
	}
	if g.held >= 0 {
		h := g.objs[g.held]
		if h.kind != g.goalObj {
			return g.dropHeld()
		}
		if app := g.kind.appliance(); app != "" && !g.ready(h) {
			a := g.recepsOf([]string{app})[0]
			if g.loc != a {
				return "go to " + g.receps[a].name
			}
			return g.kind.change() + " " + h.name + " with " + g.receps[a].name
		}
		if g.kind == lookAtObjInLight {
			at := g.objs[g.lamp].at
			if g.loc != at {
				return "go to " + g.receps[at].name
			}
			return "use " + g.objs[g.lamp].name
		}
		_, d := g.placeCost(g.loc)
		return g.reachOr(d, "put "+h.name+" in/on "+g.receps[d].name)
	}
	best, bestCost := -1, 0
	for i, o := range g.objs {
		if o.kind != g.goalObj || o.at < 0 {
			continue
		}
		if c := g.fetchCost(i); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	o := g.objs[best]
	return g.reachOr(o.at, "take "+o.name+" from "+g.receps[o.at].name)
}

// reachOr goes to receptacle r and opens it, then does then.
func (g *game) reachOr(r int, then string) string {
	if g.loc != r {
		return "go to " + g.receps[r].name
	}
	if g.receps[r].openable && !g.receps[r].open {
		return "open " + g.receps[r].name
	}
	return then
}

// dropHeld frees the hands of a distractor where the agent stands, or at the first receptacle otherwise.
func (g *game) dropHeld() string {
	r := g.loc
	if r < 0 {
		r = 0
	}
	return g.reachOr(r, "put "+g.objs[g.held].name+" in/on "+g.receps[r].name)
}

// reachCost counts the calls to stand at r with r open.
func (g *game) reachCost(from, r int) int {
	c := 0
	if from != r {
		c++
	}
	if g.receps[r].openable && !g.receps[r].open {
		c++
	}
	return c
}

// placeCost is the cheapest way to put a held goal object into a goal receptacle from receptacle from.
func (g *game) placeCost(from int) (cost, dest int) {
	dest = -1
	for _, d := range g.recepsOf([]string{g.goalRecep}) {
		if c := g.reachCost(from, d) + 1; dest < 0 || c < cost {
			cost, dest = c, d
		}
	}
	return cost, dest
}

// fetchCost counts the calls to finish the task by way of goal object o.
func (g *game) fetchCost(o int) int {
	at := g.objs[o].at
	c := g.reachCost(g.loc, at) + 1
	if app := g.kind.appliance(); app != "" && !g.ready(g.objs[o]) {
		a := g.recepsOf([]string{app})[0]
		if a != at {
			c++
		}
		c++
		at = a
	}
	if g.kind == lookAtObjInLight {
		if g.objs[g.lamp].at != at {
			c++
		}
		if !g.lampOn {
			c++
		}
		return c
	}
	pc, _ := g.placeCost(at)
	return c + pc
}
