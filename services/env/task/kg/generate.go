package kg

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/jetrl/jetrl/proto"
)

// Generation bounds.
const (
	maxAttempts    = 1_000
	questionsPerKB = 60
	heldoutModulus = 5
	extremeMinSize = 2 // argmax and argmin pick among at least this many entities
)

// shape is a kind of question: the program that answers it.
type shape int

const (
	chain2   shape = iota // two hops
	chain3                // three hops
	both                  // one hop from each of two entities, intersected
	extreme1              // one hop, then argmax or argmin
	extreme2              // two hops, then argmax or argmin
	count2                // two hops, then count
	numShapes
)

// String names the shape in tests and metrics.
func (s shape) String() string {
	return [...]string{"chain2", "chain3", "both", "extreme1", "extreme2", "count2", "unknown"}[min(s, numShapes)]
}

// op is one step of a question's program.
type op int

const (
	opNeighbors op = iota
	opIntersect
	opArgmax
	opArgmin
	opCount
)

// operand is an argument of a program step: a question entity or an earlier step's result.
type operand struct {
	entity bool
	id     int // entity id, or step index
}

// step is one program step; name is the relation (opNeighbors) or the attribute (argmax, argmin).
type step struct {
	op   op
	a, b operand
	name string
}

// splitStream separates the random streams of the two splits, so seed 7 of train and of heldout differ.
func splitStream(split string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("kg/" + split))
	return h.Sum64()
}

// splitKey hashes the instruction, which names the question's entities and relations.
func splitKey(instruction string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(instruction))
	return h.Sum64()
}

// generate draws the instance of (split, seed): a knowledge graph, then questions about it until one
// whose split key falls in the split.
func generate(s *schema, split string, seed uint64) (*game, error) {
	rng := rand.New(rand.NewPCG(seed, splitStream(split)))
	wantHeldout := split == proto.SplitHeldout
	sh := shape(rng.IntN(int(numShapes))) // drawn first, so every shape is equally common
	for range maxAttempts {
		g := drawGraph(s, rng)
		for range questionsPerKB {
			q, ok := drawQuestion(g, rng, sh)
			if !ok {
				continue
			}
			if (splitKey(q.instruction)%heldoutModulus == 0) != wantHeldout {
				continue
			}
			return newGame(g, q), nil
		}
	}
	return nil, errors.New("kg: no instance found for this split and seed")
}

// drawGraph builds a small world: countries, cities located in them, companies headquartered in cities,
// people born in cities and working for companies, and films directed by, starring and produced by them.
func drawGraph(s *schema, rng *rand.Rand) *graph {
	g := &graph{s: s, byName: map[string]int{}}
	p := s.pools
	// names draws n names of one type as pairings of first and second, never a name the graph has.
	names := func(first, second []string, sep string, n int) []string {
		out := make([]string, 0, n)
		for len(out) < n {
			name := first[rng.IntN(len(first))] + sep + second[rng.IntN(len(second))]
			if _, dup := g.byName[normName(name)]; !dup && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		return out
	}
	ids := map[string][]int{}
	add := func(typ string, ns []string) {
		for _, n := range ns {
			ids[typ] = append(ids[typ], g.add(n, typ))
		}
	}
	add(country, names(p.countryStems, p.countryEnds, "", typeSize(country)))
	add(city, names(p.cityStems, p.citySuffixes, "", typeSize(city)))
	add(company, names(p.companyStems, p.companyEnds, "", typeSize(company)))
	add(person, names(p.firstNames, p.lastNames, " ", typeSize(person)))
	add(film, names(p.filmFirst, p.filmSecond, " ", typeSize(film)))
	pick := func(typ string) int { return ids[typ][rng.IntN(len(ids[typ]))] }
	for _, c := range ids[city] {
		g.link(c, "city.located_in", pick(country))
	}
	for _, c := range ids[company] {
		g.link(c, "company.headquartered_in", pick(city))
	}
	for _, pp := range ids[person] {
		born := pick(city)
		g.link(pp, "person.born_in", born)
		nation := g.ents[born].edges["city.located_in"][0]
		if rng.IntN(10) < 3 {
			nation = pick(country)
		}
		g.link(pp, "person.nationality", nation)
		if rng.IntN(10) < 7 {
			g.link(pp, "person.works_for", pick(company))
		}
	}
	directors := ids[person][:6]
	for _, f := range ids[film] {
		for range 1 + rng.IntN(10)/7 {
			g.link(f, "film.directed_by", directors[rng.IntN(len(directors))])
		}
		for range 2 + rng.IntN(2) {
			g.link(f, "film.starring", pick(person))
		}
		for range 1 + rng.IntN(10)/6 {
			g.link(f, "film.produced_by", pick(company))
		}
		g.link(f, "film.filmed_in", pick(city))
	}
	for _, typ := range []string{country, city, company, person, film} {
		for _, a := range s.attrsOf[typ] {
			used := map[int]bool{}
			for _, id := range ids[typ] {
				v := a.lo + rng.IntN(a.hi-a.lo+1)
				for used[v] {
					v = a.lo + rng.IntN(a.hi-a.lo+1)
				}
				used[v] = true
				g.ents[id].attrs = append(g.ents[id].attrs, v)
			}
		}
	}
	return g
}

// question is a generated question: its text, the entities it names and the program that answers it.
type question struct {
	shape       shape
	instruction string
	entities    []int
	program     []step
	// The question says what it asks for: how many (a number) of some type, the entity of some type with
	// the highest (argmax) or lowest (argmin) value, or entities of some type.
	asksCount bool
	extreme   string // toolArgmax, toolArgmin or ""
	typ       string
}

// mention names an entity in a question.
func (g *graph) mention(id int) string {
	e := g.ents[id]
	if e.typ == person {
		return e.name
	}
	return "the " + e.typ + " " + e.name
}

// hop draws a relation to follow from v (never straight back along back) and its result.
func (g *graph) hop(rng *rand.Rand, v value, back string) (string, value, bool) {
	rels := slices.DeleteFunc(g.relationsOf(v), func(r string) bool { return r == back })
	if len(rels) == 0 {
		return "", value{}, false
	}
	r := rels[rng.IntN(len(rels))]
	return r, g.neighbors(v, r), true
}

// chain draws a path of n hops from a random entity: the entity, the relations and each hop's result.
func (g *graph) chain(rng *rand.Rand, n int) (int, []string, []value, bool) {
	e := rng.IntN(len(g.ents))
	v, back := g.single(e), ""
	var rels []string
	var vals []value
	for range n {
		r, next, ok := g.hop(rng, v, back)
		if !ok {
			return 0, nil, nil, false
		}
		rels, vals = append(rels, r), append(vals, next)
		v, back = next, g.s.rels[r].inverse
	}
	return e, rels, vals, true
}

// phrase nests the relations' phrases around the entity's mention.
func (g *graph) phrase(e int, rels []string) string {
	p := g.mention(e)
	for _, r := range rels {
		p = fmt.Sprintf(g.s.rels[r].phrase, p)
	}
	return p
}

// chainProgram is the neighbor steps of a chain from entity e.
func chainProgram(e int, rels []string) []step {
	prog := make([]step, len(rels))
	for i, r := range rels {
		prog[i] = step{op: opNeighbors, a: operand{id: i - 1}, name: r}
	}
	prog[0].a = operand{entity: true, id: e}
	return prog
}

// drawQuestion draws a question of shape sh; ok is false when this draw does not make a fair question.
func drawQuestion(g *graph, rng *rand.Rand, sh shape) (question, bool) {
	q := question{shape: sh}
	var vals []value
	var text string
	switch sh {
	case chain2, chain3, count2:
		n := 2
		if sh == chain3 {
			n = 3
		}
		e, rels, vs, ok := g.chain(rng, n)
		if !ok {
			return q, false
		}
		q.entities, q.program, vals = []int{e}, chainProgram(e, rels), vs
		if sh == count2 {
			if g.countShortcut(e, rels, vs) {
				return q, false
			}
			q.program = append(q.program, step{op: opCount, a: operand{id: n - 1}})
			vals = append(vals, value{isNum: true, num: len(vs[n-1].set)})
			text = fmt.Sprintf("how many %s are %s?", plural(vs[n-1].typ), g.phrase(e, rels))
		} else {
			text = fmt.Sprintf("which %s are %s?", plural(vs[n-1].typ), g.phrase(e, rels))
		}
	case extreme1, extreme2:
		n := 1
		if sh == extreme2 {
			n = 2
		}
		e, rels, vs, ok := g.chain(rng, n)
		if !ok || len(vs[n-1].set) < extremeMinSize {
			return q, false
		}
		attrs := g.s.attrsOf[vs[n-1].typ]
		a := rng.IntN(len(attrs))
		o, word := opArgmax, "highest"
		if rng.IntN(2) == 1 {
			o, word = opArgmin, "lowest"
		}
		q.entities = []int{e}
		q.program = append(chainProgram(e, rels), step{op: o, a: operand{id: n - 1}, name: attrs[a].name})
		vals = append(vs, g.extreme(vs[n-1], a, o == opArgmax))
		text = fmt.Sprintf("among %s, which %s has the %s %s?", g.phrase(e, rels), vs[n-1].typ, word, attrs[a].phrase)
	case both:
		e1, r1, v1, ok := g.chain(rng, 1)
		if !ok {
			return q, false
		}
		e2, r2, v2, ok := g.hopInto(rng, v1[0].typ)
		if !ok || e1 == e2 {
			return q, false
		}
		in := intersect(v1[0], v2[0])
		if len(in.set) == 0 || in.equal(v1[0]) || in.equal(v2[0]) {
			return q, false
		}
		q.entities = []int{e1, e2}
		q.program = []step{
			{op: opNeighbors, a: operand{entity: true, id: e1}, name: r1[0]},
			{op: opNeighbors, a: operand{entity: true, id: e2}, name: r2[0]},
			{op: opIntersect, a: operand{id: 0}, b: operand{id: 1}},
		}
		vals = []value{v1[0], v2[0], in}
		text = fmt.Sprintf("which %s are both %s and %s?", plural(in.typ), g.phrase(e1, r1), g.phrase(e2, r2))
	}
	// The answer must be reachable only by finishing the program: no earlier result or named entity holds it.
	final := vals[len(vals)-1]
	for _, v := range vals[:len(vals)-1] {
		if v.equal(final) {
			return q, false
		}
	}
	for _, e := range q.entities {
		if g.single(e).equal(final) {
			return q, false
		}
	}
	q.asksCount, q.typ = final.isNum, final.typ
	switch q.program[len(q.program)-1].op {
	case opArgmax:
		q.extreme = toolArgmax
	case opArgmin:
		q.extreme = toolArgmin
	}
	if final.isNum {
		q.typ = vals[len(vals)-2].typ
	}
	names := make([]string, len(q.entities))
	for i, e := range q.entities {
		names[i] = g.ents[e].name
	}
	q.instruction = fmt.Sprintf("Question: %s\nEntities: [%s]", text, strings.Join(names, ", "))
	return q, true
}

// hopInto draws an entity and a relation from it into entities of type typ, and the relation's result.
func (g *graph) hopInto(rng *rand.Rand, typ string) (int, []string, []value, bool) {
	type pair struct {
		e   int
		rel string
	}
	var pairs []pair
	for e := range g.ents {
		for _, r := range g.relationsOf(g.single(e)) {
			if g.s.rels[r].to == typ {
				pairs = append(pairs, pair{e, r})
			}
		}
	}
	if len(pairs) == 0 {
		return 0, nil, nil, false
	}
	p := pairs[rng.IntN(len(pairs))]
	return p.e, []string{p.rel}, []value{g.neighbors(g.single(p.e), p.rel)}, true
}

// countShortcut reports whether counting a wrong set one call away from the right path gives the right
// number: the count of the first hop, of another relation of the entity or of the first hop, or of a
// further hop. Such questions would reward counting anything.
func (g *graph) countShortcut(e int, rels []string, vs []value) bool {
	want := len(vs[len(vs)-1].set)
	if want < 2 {
		return true
	}
	from := append([]value{g.single(e)}, vs...)
	for i, v := range from {
		if i > 0 && i < len(from)-1 && len(v.set) == want {
			return true
		}
		for _, r := range g.relationsOf(v) {
			if i < len(rels) && r == rels[i] {
				continue
			}
			if len(g.neighbors(v, r).set) == want {
				return true
			}
		}
	}
	return false
}
