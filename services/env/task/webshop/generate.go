package webshop

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
	maxAttempts    = 10_000
	heldoutModulus = 5
	numQueries     = 6 // search candidates on the search page: the goal's query and five others
)

// goalOption is one option the goal asks for: a dim of the goal's category and its value.
type goalOption struct {
	dim   int
	value string
}

// goal is what the instruction asks for, after a target product, as WebShop's goals are.
type goal struct {
	cat         int
	target      int
	attrs       []string
	opts        []goalOption
	limit       int   // price limit in whole dollars
	satisfying  []int // products of the category with every goal attribute; all offer the goal's options under the limit
	query       string
	instruction string
}

// splitStream separates the random streams of the two splits, so seed 7 of train and of heldout differ.
func splitStream(split string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("webshop/" + split))
	return h.Sum64()
}

// splitKey hashes the instruction, which with the fixed search page is all the opening shows.
func splitKey(instruction string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("webshop|" + instruction))
	return h.Sum64()
}

// generate draws the instance of (split, seed): a goal whose split key falls in the split, then the
// search candidates.
func generate(c *catalog, split string, seed uint64) (*game, error) {
	rng := rand.New(rand.NewPCG(seed, splitStream(split)))
	wantHeldout := split == proto.SplitHeldout
	for range maxAttempts {
		gl, ok := drawGoal(c, rng)
		if !ok {
			continue
		}
		if (splitKey(gl.instruction)%heldoutModulus == 0) != wantHeldout {
			continue
		}
		g := &game{cat: c, goal: gl, queries: drawQueries(c, gl, rng)}
		g.opening = g.open()
		return g, nil
	}
	return nil, errors.New("webshop: no instance found for this split and seed")
}

// drawGoal picks a target product, one or two of its attributes, one or two options every product with
// those attributes offers, and a price limit above all their prices; ok is false when the attributes make
// an unfair goal (see want).
func drawGoal(c *catalog, rng *rand.Rand) (goal, bool) {
	t := rng.IntN(len(c.products))
	p := &c.products[t]
	gl := goal{cat: p.cat, target: t}
	pick := rng.Perm(len(p.attrs))[:1+rng.IntN(2)]
	slices.Sort(pick)
	for _, k := range pick {
		gl.attrs = append(gl.attrs, p.attrs[k])
	}
	w := c.wants[wantKey(c.cats[p.cat].noun, gl.attrs)]
	if !w.fair {
		return goal{}, false
	}
	gl.satisfying, gl.query = w.satisfying, w.query
	var usable []int
	for d, vs := range w.common {
		if len(vs) > 0 {
			usable = append(usable, d)
		}
	}
	n := len(usable)
	if n > 1 && rng.IntN(4) == 0 {
		n = 1 // mostly ask for both options, as most WebShop goals do
	}
	dims := rng.Perm(len(usable))[:n]
	slices.Sort(dims)
	for _, k := range dims {
		vs := w.common[usable[k]]
		gl.opts = append(gl.opts, goalOption{dim: usable[k], value: vs[rng.IntN(len(vs))]})
	}
	gl.limit = priceLimit(rng, w.maxCents)
	gl.instruction = instruction(c, gl, rng)
	return gl, true
}

// fits reports whether product q has the goal's type and attributes.
func (gl *goal) fits(q int) bool { return slices.Contains(gl.satisfying, q) }

// priceLimit follows WebShop: of the first four multiples of 10 dollars above the price, sample two and
// take the larger.
func priceLimit(rng *rand.Rand, cents int) int {
	first := cents/1000 + 1 // the least multiple of 10 dollars strictly above the price, in tens
	a, b := rng.IntN(4), rng.IntN(3)
	if b >= a {
		b++
	}
	return (first + max(a, b)) * 10
}

// instruction words the goal in one of WebShop's phrasings.
func instruction(c *catalog, gl goal, rng *rand.Rand) string {
	cat := c.cats[gl.cat]
	prefixes := [...]string{"i am looking for", "i need", "find me", "i would like", "i want", "please find",
		"i am shopping for", "get me", "search for", "help me find"}
	prefix := prefixes[rng.IntN(len(prefixes))]
	desc := strings.Join(gl.attrs, " ") + " " + cat.noun
	if len(gl.attrs) == 2 && rng.IntN(2) == 0 {
		desc = gl.attrs[0] + " and " + gl.attrs[1] + " " + cat.noun
	}
	opts := slices.Clone(gl.opts)
	if rng.IntN(2) == 0 {
		slices.Reverse(opts) // either option may come first
	}
	parts := make([]string, len(opts))
	var optText string
	if rng.IntN(2) == 0 {
		for i, o := range opts {
			parts[i] = cat.dims[o.dim].name + " " + o.value
		}
		optText = " in " + strings.Join(parts, " and ")
	} else {
		for i, o := range opts {
			parts[i] = cat.dims[o.dim].name + ": " + o.value
		}
		optText = " with " + strings.Join(parts, ", and ")
	}
	return fmt.Sprintf("%s %s%s, and price lower than %d.00 dollars", prefix, desc, optText, gl.limit)
}

// drawQueries lists the search candidates: the goal's query, the bare noun, the noun with an attribute the
// goal does not ask for, and three other categories' queries (one sharing a goal attribute when any can).
func drawQueries(c *catalog, gl goal, rng *rand.Rand) []string {
	cat := c.cats[gl.cat]
	qs := []string{gl.query, cat.noun}
	var others []string
	for _, a := range cat.attrs {
		if !slices.Contains(gl.attrs, a) {
			others = append(others, a)
		}
	}
	qs = append(qs, others[rng.IntN(len(others))]+" "+cat.noun)
	var sharing []int
	for ci, oc := range c.cats {
		if ci != gl.cat && slices.ContainsFunc(oc.attrs, func(a string) bool { return slices.Contains(gl.attrs, a) }) {
			sharing = append(sharing, ci)
		}
	}
	used := map[int]bool{gl.cat: true}
	if len(sharing) > 0 {
		ci := sharing[rng.IntN(len(sharing))]
		used[ci] = true
		var shared []string
		for _, a := range gl.attrs {
			if slices.Contains(c.cats[ci].attrs, a) {
				shared = append(shared, a)
			}
		}
		qs = append(qs, shared[rng.IntN(len(shared))]+" "+c.cats[ci].noun)
	}
	for len(qs) < numQueries {
		ci := rng.IntN(len(c.cats))
		if used[ci] {
			continue
		}
		used[ci] = true
		oc := c.cats[ci]
		qs = append(qs, oc.attrs[rng.IntN(len(oc.attrs))]+" "+oc.noun)
	}
	rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
	return qs
}
