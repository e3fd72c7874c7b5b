package kg

import (
	"slices"
	"strings"
)

// entity is one node of the graph.
type entity struct {
	name  string
	typ   string
	attrs []int            // aligned with schema.attrsOf[typ]
	edges map[string][]int // relation name -> neighbor ids, sorted
}

// graph is one instance's knowledge base.
type graph struct {
	s      *schema
	ents   []entity
	byName map[string]int // normalized name -> id
}

// normName forgives case and spacing in entity names.
func normName(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

func (g *graph) add(name, typ string) int {
	g.ents = append(g.ents, entity{name: name, typ: typ, edges: map[string][]int{}})
	id := len(g.ents) - 1
	g.byName[normName(name)] = id
	return id
}

// link adds the edge a -rel-> b and its inverse, once.
func (g *graph) link(a int, rel string, b int) {
	r := g.s.rels[rel]
	if slices.Contains(g.ents[a].edges[rel], b) {
		return
	}
	g.ents[a].edges[rel] = insertSorted(g.ents[a].edges[rel], b)
	g.ents[b].edges[r.inverse] = insertSorted(g.ents[b].edges[r.inverse], a)
}

func insertSorted(xs []int, x int) []int {
	i, found := slices.BinarySearch(xs, x)
	if found {
		return xs
	}
	return slices.Insert(xs, i, x)
}

// ofType lists the ids of one type in id order.
func (g *graph) ofType(typ string) []int {
	var out []int
	for i, e := range g.ents {
		if e.typ == typ {
			out = append(out, i)
		}
	}
	return out
}

// value is what a variable holds: a set of entities of one type, or a number (from count).
type value struct {
	typ   string
	set   []int // sorted ids
	isNum bool
	num   int
}

func (v value) equal(w value) bool {
	if v.isNum || w.isNum {
		return v.isNum && w.isNum && v.num == w.num
	}
	return v.typ == w.typ && slices.Equal(v.set, w.set)
}

// single is the value of one entity.
func (g *graph) single(id int) value { return value{typ: g.ents[id].typ, set: []int{id}} }

// relationsOf lists the relations some member of v has, in schema order.
func (g *graph) relationsOf(v value) []string {
	var out []string
	for _, r := range g.s.relsFrom[v.typ] {
		for _, id := range v.set {
			if len(g.ents[id].edges[r.name]) > 0 {
				out = append(out, r.name)
				break
			}
		}
	}
	return out
}

// neighbors follows rel from every member of v.
func (g *graph) neighbors(v value, rel string) value {
	out := value{typ: g.s.rels[rel].to}
	for _, id := range v.set {
		for _, n := range g.ents[id].edges[rel] {
			out.set = insertSorted(out.set, n)
		}
	}
	return out
}

// intersect keeps the members of both.
func intersect(a, b value) value {
	out := value{typ: a.typ}
	for _, id := range a.set {
		if _, ok := slices.BinarySearch(b.set, id); ok {
			out.set = append(out.set, id)
		}
	}
	return out
}

// attrIndex is the position of attribute name among typ's attributes, or -1.
func (g *graph) attrIndex(typ, name string) int {
	return slices.IndexFunc(g.s.attrsOf[typ], func(a attribute) bool { return a.name == name })
}

// extreme returns the member of a non-empty v with the largest (max) or smallest attribute value.
func (g *graph) extreme(v value, attr int, max bool) value {
	best := v.set[0]
	for _, id := range v.set[1:] {
		a, b := g.ents[id].attrs[attr], g.ents[best].attrs[attr]
		if (max && a > b) || (!max && a < b) {
			best = id
		}
	}
	return value{typ: v.typ, set: []int{best}}
}
