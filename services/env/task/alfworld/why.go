package alfworld

import (
	"fmt"
	"strings"
)

// why explains why a normalized action is not admissible, without revealing anything the agent has not seen.
func (g *game) why(a string) string {
	if rest, ok := strings.CutPrefix(a, "go to "); ok {
		r, ok := g.recepIndex[rest]
		switch {
		case !ok:
			return fmt.Sprintf("there is no %s in this room", rest)
		case r == g.loc:
			return fmt.Sprintf("you are already at the %s", rest)
		}
	}
	for _, v := range []string{"open ", "close "} {
		if rest, ok := strings.CutPrefix(a, v); ok {
			return g.whyOpenClose(v == "open ", rest)
		}
	}
	if rest, ok := strings.CutPrefix(a, "take "); ok {
		obj, rec, found := strings.Cut(rest, " from ")
		if !found {
			return `write it as "take OBJECT from RECEPTACLE"`
		}
		if msg := g.whyHere(rec); msg != "" {
			return msg
		}
		if g.held >= 0 {
			return fmt.Sprintf("you are already carrying the %s; put it somewhere first", g.objs[g.held].name)
		}
		if o, ok := g.objIndex[obj]; ok && g.objs[o].at == g.loc && g.objs[o].fixed {
			return fmt.Sprintf("the %s cannot be picked up", obj)
		}
		return fmt.Sprintf("there is no %s in/on the %s", obj, rec)
	}
	if rest, ok := strings.CutPrefix(a, "put "); ok {
		obj, rec, found := strings.Cut(rest, " in/on ")
		if !found {
			return `write it as "put OBJECT in/on RECEPTACLE"`
		}
		if msg := g.whyCarrying(obj); msg != "" {
			return msg
		}
		return g.whyHere(rec)
	}
	for _, u := range []struct{ verb, tool string }{{"clean ", sinkbasin}, {"heat ", microwave}, {"cool ", fridge}} {
		if rest, ok := strings.CutPrefix(a, u.verb); ok {
			obj, rec, found := strings.Cut(rest, " with ")
			if !found {
				return fmt.Sprintf("write it as \"%sOBJECT with %s 1\"", u.verb, u.tool)
			}
			if msg := g.whyCarrying(obj); msg != "" {
				return msg
			}
			if !strings.HasPrefix(rec, u.tool+" ") {
				return fmt.Sprintf("you can only %s with a %s", strings.TrimSpace(u.verb), u.tool)
			}
			return g.whyHere(rec)
		}
	}
	if rest, ok := strings.CutPrefix(a, "use "); ok {
		switch {
		case !strings.HasPrefix(rest, desklamp+" "):
			return "only a desklamp can be used"
		case g.lamp < 0 || g.objs[g.lamp].name != rest || g.objs[g.lamp].at != g.loc:
			return fmt.Sprintf("there is no %s where you are", rest)
		case g.lampOn:
			return fmt.Sprintf("the %s is already on", rest)
		}
	}
	if _, ok := strings.CutPrefix(a, "examine "); ok {
		return "you can examine only the receptacle you are at or the object you carry"
	}
	return `unknown action; use one of the admissible actions, such as "go to RECEPTACLE", "open RECEPTACLE", ` +
		`"take OBJECT from RECEPTACLE" or "put OBJECT in/on RECEPTACLE"`
}

func (g *game) whyOpenClose(open bool, name string) string {
	r, ok := g.recepIndex[name]
	switch {
	case !ok:
		return fmt.Sprintf("there is no %s in this room", name)
	case !g.receps[r].openable:
		return fmt.Sprintf("the %s cannot be opened or closed", name)
	case r != g.loc:
		return fmt.Sprintf("you are not at the %s; go to it first", name)
	case open:
		return fmt.Sprintf("the %s is already open", name)
	}
	return fmt.Sprintf("the %s is already closed", name)
}

// whyHere says why the agent cannot reach into receptacle name, or "" if it can.
func (g *game) whyHere(name string) string {
	r, ok := g.recepIndex[name]
	switch {
	case !ok:
		return fmt.Sprintf("there is no %s in this room", name)
	case r != g.loc:
		return fmt.Sprintf("you are not at the %s; go to it first", name)
	case g.receps[r].openable && !g.receps[r].open:
		return fmt.Sprintf("the %s is closed; open it first", name)
	}
	return ""
}

// whyCarrying says why the agent does not hold object name, or "" if it does.
func (g *game) whyCarrying(name string) string {
	switch {
	case g.held < 0:
		return fmt.Sprintf("you are not carrying the %s (your hands are empty)", name)
	case g.objs[g.held].name != name:
		return fmt.Sprintf("you are not carrying the %s (you carry the %s)", name, g.objs[g.held].name)
	}
	return ""
}
