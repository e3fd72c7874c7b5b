package webshop

import (
	"fmt"
	"slices"
)

// score is WebShop's reward for one purchase and its parts.
type score struct {
	typ           float64 // r_type: 1, 0.5, 0.1 or 0
	attrs, nAttrs int
	opts, nOpts   int
	priceOK       bool
	reward        float64
}

// typeReward follows WebShop's get_type_reward: the query match is the same category, the category match
// the same department, and the title score the share of the goal's type nouns in the bought product's
// title; the category noun is each title's one type noun, so another category's product scores 0.
func typeReward(c *catalog, goalCat, bought int) float64 {
	gc, bc := c.cats[goalCat], c.cats[c.products[bought].cat]
	queryMatch := goalCat == c.products[bought].cat
	categoryMatch := gc.dept == bc.dept
	titleScore := 0.0
	if slices.Contains(words(c.products[bought].title), gc.noun) {
		titleScore = 1
	}
	r := 1.0
	if !(queryMatch || categoryMatch || titleScore > 0.2) {
		r = 0.5
	}
	if titleScore < 0.1 {
		r = 0.1
	}
	if titleScore == 0 {
		r = 0
	}
	return r
}

// reward scores buying product bought with the selected option values (one per dim, "" for none):
// r_type · (attributes met + options met + [price ≤ limit]) / (goal attributes + goal options + 1).
func (c *catalog) reward(gl goal, bought int, selected []string) score {
	p := &c.products[bought]
	s := score{typ: typeReward(c, gl.cat, bought), nAttrs: len(gl.attrs), nOpts: len(gl.opts), priceOK: p.cents <= gl.limit*100}
	for _, a := range gl.attrs {
		if slices.Contains(p.attrs, a) {
			s.attrs++
		}
	}
	for _, o := range gl.opts {
		if slices.Contains(selected, o.value) {
			s.opts++
		}
	}
	met := s.attrs + s.opts
	if s.priceOK {
		met++
	}
	s.reward = s.typ * float64(met) / float64(s.nAttrs+s.nOpts+1)
	return s
}

// String explains the score the way the purchase page shows it.
func (s score) String() string {
	price := "no"
	if s.priceOK {
		price = "yes"
	}
	return fmt.Sprintf("reward %.2f: attributes %d of %d, options %d of %d, price within the limit %s, product type %.1f",
		s.reward, s.attrs, s.nAttrs, s.opts, s.nOpts, price, s.typ)
}
