package webshop

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jetrl/jetrl/proto"
)

// shared is one catalogue for the package's tests; building it is deterministic and it is only read.
var shared = sync.OnceValue(newCatalog)

func TestWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Waterproof  Leather-Boots", []string{"waterproof", "leather", "boots"}},
		{"price lower than 80.00 dollars", []string{"price", "lower", "than", "80", "00", "dollars"}},
		{"[B0AB12CD34] size: 9, color: black", []string{"b0ab12cd34", "size", "9", "color", "black"}},
		{"< prev", []string{"prev"}},
		{"", nil},
	} {
		if got := words(c.in); !slices.Equal(got, c.want) {
			t.Errorf("words(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBM25Ranking(t *testing.T) {
	ix := newBM25([][]string{
		{"waterproof", "leather", "boots"},                  // 0
		{"leather", "jacket"},                               // 1
		{"waterproof", "boots"},                             // 2
		{"suede", "boots", "boots", "boots"},                // 3
		{"organic", "coffee"},                               // 4
		{"waterproof", "leather", "boots", "extra", "long"}, // 5: doc 0 and more words
	})
	for _, c := range []struct {
		name  string
		query string
		want  []int
	}{
		{"more matched terms rank first, shorter first", "waterproof leather boots", []int{0, 5, 2, 1, 3}},
		{"repeated query terms count once", "leather leather boots", []int{0, 5, 1, 3, 2}},
		{"rarer term outweighs a common one", "jacket boots", []int{1, 3, 2, 0, 5}},
		{"term frequency saturates but still counts", "boots", []int{3, 2, 0, 5}},
		{"no match, no results", "zorkmid", nil},
		{"case and punctuation are ignored", "ORGANIC, coffee!", []int{4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ix.rank(words(c.query)); !slices.Equal(got, c.want) {
				t.Errorf("rank(%q) = %v, want %v (scores %v)", c.query, got, c.want, ix.score(words(c.query)))
			}
		})
	}
	// Lucene's idf: ln(1 + (N − df + 0.5)/(df + 0.5)); "boots" is in 4 of 6 documents.
	if got, want := ix.idf(4), math.Log(1+(6-4+0.5)/(4+0.5)); math.Abs(got-want) > 1e-12 {
		t.Errorf("idf(4) = %v, want %v", got, want)
	}
}

func TestCatalog(t *testing.T) {
	c := shared()
	if len(c.products) < 1000 {
		t.Fatalf("%d products, want at least 1000", len(c.products))
	}
	filler := map[string]bool{}
	for _, w := range words("i am looking for need find me would like want please shopping get search help with in and " +
		"size color flavor scent price lower than dollars") {
		filler[w] = true
	}
	titles := map[string]bool{}
	for ci, cat := range c.cats {
		nouns := map[string]bool{}
		for _, oc := range c.cats {
			nouns[oc.noun] = true
		}
		values := map[string]bool{}
		for _, d := range cat.dims {
			for _, v := range d.values {
				if values[v] || slices.Contains(cat.attrs, v) || nouns[v] || filler[v] || len(words(v)) != 1 {
					t.Errorf("%s: option value %q repeats or collides with a title or instruction word", cat.noun, v)
				}
				values[v] = true
			}
		}
		for _, a := range cat.attrs {
			if nouns[a] || filler[a] || len(words(a)) != 1 {
				t.Errorf("%s: attribute %q collides or is not one word", cat.noun, a)
			}
		}
		if len(c.byCat[ci]) != perCategory {
			t.Errorf("%s: %d products", cat.noun, len(c.byCat[ci]))
		}
	}
	for i, p := range c.products {
		if titles[p.title] {
			t.Errorf("title %q repeats", p.title)
		}
		titles[p.title] = true
		if c.byID[strings.ToLower(p.id)] != i || len(p.id) != 10 || !strings.HasPrefix(p.id, "B0") {
			t.Errorf("product %d: id %q", i, p.id)
		}
		if want := strings.Join(append(slices.Clone(p.attrs), c.cats[p.cat].noun), " "); p.title != want || len(p.attrs) < 2 || len(p.attrs) > 3 {
			t.Errorf("product %d: title %q, attributes %v", i, p.title, p.attrs)
		}
		if p.cents%100 != 99 || p.cents < c.cats[p.cat].priceLo*100 || p.cents > c.cats[p.cat].priceHi*100+99 {
			t.Errorf("product %d: price %s", i, price(p.cents))
		}
		for d, vs := range p.offers {
			if dim := c.cats[p.cat].dims[d]; len(vs) < dim.min || len(vs) > dim.max {
				t.Errorf("product %d: offers %v of %s", i, vs, dim.name)
			}
		}
	}
	if a, b := newCatalog(), newCatalog(); fmt.Sprint(a.products) != fmt.Sprint(b.products) {
		t.Error("the catalogue is not deterministic")
	}
}

func TestPriceLimit(t *testing.T) {
	// WebShop: of the first four multiples of 10 dollars above the price, the larger of two sampled ones.
	for _, c := range []struct {
		cents  int
		lo, hi int
	}{{4599, 60, 80}, {4999, 60, 80}, {5099, 70, 90}, {1599, 30, 50}, {39999, 410, 430}} {
		seen := map[int]bool{}
		rng := rand.New(rand.NewPCG(uint64(c.cents), 1))
		for range 200 {
			l := priceLimit(rng, c.cents)
			if l < c.lo || l > c.hi || l%10 != 0 || l*100 <= c.cents {
				t.Fatalf("priceLimit(%s) = %d, want a multiple of 10 in [%d, %d]", price(c.cents), l, c.lo, c.hi)
			}
			seen[l] = true
		}
		if len(seen) != 3 {
			t.Errorf("priceLimit(%s) takes %d values, want 3", price(c.cents), len(seen))
		}
	}
}

// bootsGoal is a fixed goal over the shared catalogue: the first boots product's first two attributes, its
// first offered size and color, and a limit above every fitting product's price.
func bootsGoal(t *testing.T) (goal, int) {
	t.Helper()
	c := shared()
	ci := slices.IndexFunc(c.cats, func(cat category) bool { return cat.noun == "boots" })
	target := c.byCat[ci][0]
	p := c.products[target]
	gl := goal{cat: ci, target: target, attrs: p.attrs[:2], limit: 1000,
		opts: []goalOption{{0, p.offers[0][0]}, {1, p.offers[1][0]}}}
	gl.query = strings.Join(gl.attrs, " ") + " boots"
	for _, q := range c.byCat[ci] {
		if c.products[q].has(gl.attrs) {
			gl.satisfying = append(gl.satisfying, q)
		}
	}
	return gl, target
}

func TestReward(t *testing.T) {
	c := shared()
	gl, target := bootsGoal(t)
	p := c.products[target]
	size, color := p.offers[0][0], p.offers[1][0]
	otherColor := p.offers[1][1]
	// A boots product lacking the first goal attribute, and a product of another category and department.
	lacking := c.byCat[gl.cat][slices.IndexFunc(c.byCat[gl.cat], func(q int) bool { return !c.products[q].has(gl.attrs[:1]) && c.products[q].has(gl.attrs[1:]) })]
	coffee := c.byCat[slices.IndexFunc(c.cats, func(cat category) bool { return cat.noun == "coffee" })][0]
	cheap := gl
	cheap.limit = p.cents/100 - 1
	for _, tc := range []struct {
		name     string
		gl       goal
		bought   int
		selected []string
		want     float64
	}{
		{"everything met", gl, target, []string{size, color}, 1},
		{"no options selected", gl, target, []string{"", ""}, 3.0 / 5},
		{"one option wrong", gl, target, []string{size, otherColor}, 4.0 / 5},
		{"one attribute missing", gl, lacking, []string{size, color}, 4.0 / 5},
		{"over the price limit", cheap, target, []string{size, color}, 4.0 / 5},
		{"another product type scores 0", gl, coffee, []string{"", ""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := c.reward(tc.gl, tc.bought, tc.selected)
			if math.Abs(s.reward-tc.want) > 1e-12 {
				t.Errorf("reward %v (%s), want %v", s.reward, s, tc.want)
			}
		})
	}
}

func TestTypeReward(t *testing.T) {
	c := shared()
	cat := func(noun string) int {
		return slices.IndexFunc(c.cats, func(k category) bool { return k.noun == noun })
	}
	boots := cat("boots")
	for _, tc := range []struct {
		bought string
		want   float64
	}{{"boots", 1}, {"sneakers", 0}, {"coffee", 0}} {
		if got := typeReward(c, boots, c.byCat[cat(tc.bought)][0]); got != tc.want {
			t.Errorf("boots goal, bought %s: r_type %v, want %v", tc.bought, got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"Next >": linkNext, "next": linkNext, "[Next >]": linkNext, "< Prev": linkPrev, "previous": linkPrev,
		"Back to Search": linkBack, "[back to search]": linkBack, "BUY NOW": linkBuyNow, "[Buy Now]": linkBuyNow, "buy": linkBuyNow,
		"  Waterproof   Leather Boots ": "waterproof leather boots", "[B0AB12CD34]": "b0ab12cd34",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// fixed is an instance over the shared catalogue with the boots goal, on the search page.
func fixed(t *testing.T) *game {
	t.Helper()
	gl, _ := bootsGoal(t)
	gl.instruction = "i need " + gl.query
	g := &game{cat: shared(), goal: gl, queries: []string{gl.query, "boots"}}
	g.opening = g.open()
	return g
}

func click(target string) proto.ToolCall { return clickOf(target) }

func TestBadCallObservations(t *testing.T) {
	g := fixed(t)
	for _, c := range []struct {
		call proto.ToolCall
		want string
	}{
		{proto.ToolCall{Name: "foo", Arguments: `{"target":"x"}`}, `unknown tool "foo"; available: search_action, click_action`},
		{proto.ToolCall{Name: SearchTool, Arguments: `{"keywords":`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: SearchTool, Arguments: ``}, "bad arguments: empty"},
		{proto.ToolCall{Name: ClickTool, Arguments: `[]`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: ClickTool, Arguments: `null`}, "bad arguments: not a JSON object"},
		{proto.ToolCall{Name: SearchTool, Arguments: `{}`}, `bad arguments: missing required "keywords"`},
		{proto.ToolCall{Name: ClickTool, Arguments: `{"keywords":"boots"}`}, `bad arguments: missing required "target"`},
		{proto.ToolCall{Name: SearchTool, Arguments: `{"keywords":7}`}, `bad arguments: "keywords" must be a string`},
		{proto.ToolCall{Name: SearchTool, Arguments: `{"keywords":"boots","page":2}`}, `bad arguments: unknown argument "page"`},
		{proto.ToolCall{Name: SearchTool, Arguments: `{"keywords":"   "}`}, `bad arguments: "keywords" is empty`},
		{click("buy now"), `"buy now" is not admissible here: the search page has nothing to click`},
	} {
		r := g.Step(c.call)
		if !strings.HasPrefix(r.Observation, c.want) || r.Done || r.Status != proto.StatusRunning || len(r.Admissible) != 2 || r.Metrics["invalid_call"] != 1 {
			t.Errorf("%s %s: %+v, want an observation starting %q", c.call.Name, c.call.Arguments, r, c.want)
		}
	}
	if g.page != pageSearch {
		t.Fatal("bad calls changed the page")
	}
}

// texts renders calls as the policy reads them.
func texts(calls []proto.ToolCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.Text()
	}
	return out
}

func TestNavigation(t *testing.T) {
	g := fixed(t)
	c := g.cat
	r := g.Step(callOf(SearchTool, "keywords", "boots"))
	if !strings.HasPrefix(r.Observation, `Results for "boots", page 1 of 5 (50 items):`) {
		t.Fatalf("results: %q", r.Observation)
	}
	first := g.onPage()
	adm := texts(r.Admissible)
	if len(adm) != 12 || adm[0] != "click_action "+c.products[first[0]].title || !slices.Contains(adm, "click_action next >") || slices.Contains(adm, "click_action < prev") {
		t.Fatalf("page 1 admissible %q", adm)
	}
	steps := []struct {
		call proto.ToolCall
		want string // prefix of the observation
	}{
		{click("< prev"), `"< prev" is not admissible here: this is the first page`},
		{callOf(SearchTool, "keywords", "boots"), "search_action is not admissible here"},
		{click("[Next >]"), `Results for "boots", page 2 of 5`},
		{click("next"), `Results for "boots", page 3 of 5`},
		{click("< prev"), `Results for "boots", page 2 of 5`},
		{click(c.products[first[0]].title), `"` + c.products[first[0]].title + `" is not admissible here: no item or link on this page`},
		{click("buy now"), `"buy now" is not admissible here: open an item first`},
		{click("back to search"), searchView},
		{callOf(SearchTool, "keywords", "zorkmid"), `No results for "zorkmid"`},
		{click("next >"), `"next >" is not admissible here: this is the last page`},
		{click("back to search"), searchView},
		{callOf(SearchTool, "keywords", g.goal.query), "Results for"},
	}
	for _, s := range steps {
		if r = g.Step(s.call); !strings.HasPrefix(r.Observation, s.want) {
			t.Fatalf("%s: observation %q, want prefix %q", s.call.Text(), r.Observation, s.want)
		}
	}
	// Open the goal's target by its id, in brackets and lower case.
	at := slices.Index(g.onPage(), g.goal.target)
	if at < 0 {
		t.Skip("the target is not on the goal query's first page")
	}
	p := c.products[g.goal.target]
	if r = g.Step(click("[" + strings.ToLower(p.id) + "]")); !strings.HasPrefix(r.Observation, "["+p.id+"] "+p.title+"\n") ||
		!strings.Contains(r.Observation, "\nselected: none\n") {
		t.Fatalf("item page: %q", r.Observation)
	}
	adm = texts(r.Admissible)
	if n := len(p.offers[0]) + len(p.offers[1]) + 3; len(adm) != n || adm[n-3] != "click_action buy now" {
		t.Fatalf("item admissible %q", adm)
	}
	size, color := g.goal.opts[0].value, g.goal.opts[1].value
	other := p.offers[1][1]
	for _, s := range []struct {
		call proto.ToolCall
		want string
	}{
		{click("next >"), `"next >" is not admissible here: an item page has no next page`},
		{click("zorkmid"), `"zorkmid" is not admissible here: this item offers no such option`},
		{click(other), "You selected color " + other + "."},
		{click(size), "You selected size " + size + "."},
		{click(strings.ToUpper(color)), "You selected color " + color + "."},
	} {
		if r = g.Step(s.call); !strings.HasPrefix(r.Observation, s.want) {
			t.Fatalf("%s: observation %q, want prefix %q", s.call.Text(), r.Observation, s.want)
		}
	}
	if want := fmt.Sprintf("\nselected: size %s, color %s\n", size, color); !strings.Contains(r.Observation, want) {
		t.Fatalf("selection not shown: %q", r.Observation)
	}
	r = g.Step(click("Buy Now"))
	if !r.Done || r.Reward != 1 || r.Status != proto.StatusCompleted || r.Admissible != nil || r.Metrics["reward_option"] != 1 ||
		!strings.HasPrefix(r.Observation, fmt.Sprintf("You bought [%s] %s with size %s, color %s for %s.", p.id, p.title, size, color, price(p.cents))) {
		t.Fatalf("buy: %+v", r)
	}
	if again := g.Step(click("buy now")); again.Reward != 1 || !again.Done {
		t.Fatalf("a step after the end: %+v", again)
	}
}

func TestGeneratedGoals(t *testing.T) {
	c := shared()
	shapes := map[string]int{}
	for seed := range uint64(2000) {
		for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
			g, err := generate(c, split, seed)
			if err != nil {
				t.Fatal(err)
			}
			gl := g.goal
			if held := splitKey(gl.instruction)%heldoutModulus == 0; held != (split == proto.SplitHeldout) {
				t.Fatalf("%s seed %d: split key %d", split, seed, splitKey(gl.instruction))
			}
			shapes[fmt.Sprintf("%d attributes, %d options", len(gl.attrs), len(gl.opts))]++
			iw := words(gl.instruction)
			for _, w := range append(slices.Clone(gl.attrs), c.cats[gl.cat].noun) {
				if !slices.Contains(iw, w) {
					t.Fatalf("seed %d: instruction %q lacks %q", seed, gl.instruction, w)
				}
			}
			if !gl.fits(gl.target) {
				t.Fatalf("seed %d: the target does not fit its own goal", seed)
			}
			for _, q := range gl.satisfying {
				p := c.products[q]
				if p.cat != gl.cat || !p.has(gl.attrs) || p.cents >= gl.limit*100 {
					t.Fatalf("seed %d: fitting product %q at %s for %q", seed, p.title, price(p.cents), gl.instruction)
				}
				for _, o := range gl.opts {
					if !p.offersValue(o.dim, o.value) || !slices.Contains(iw, o.value) {
						t.Fatalf("seed %d: %q lacks option %s or the instruction %q does", seed, p.title, o.value, gl.instruction)
					}
				}
			}
			if !slices.ContainsFunc(c.search(gl.query)[:resultsPageSize], gl.fits) {
				t.Fatalf("seed %d: no fitting product on the first page for %q", seed, gl.query)
			}
			if len(g.queries) != numQueries || !slices.Contains(g.queries, gl.query) || len(slices.Compact(slices.Sorted(slices.Values(g.queries)))) != numQueries {
				t.Fatalf("seed %d: queries %q", seed, g.queries)
			}
		}
	}
	for s, n := range shapes {
		t.Logf("%s: %d of 4000", s, n)
	}
	if _, err := New().New("test", 1); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Fatalf("unknown split: %v", err)
	}
}

func TestManyDistinctInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 12,000 instances")
	}
	c := shared()
	seen := map[string]bool{}
	for seed := range uint64(12_000) {
		g, err := generate(c, proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		seen[g.goal.instruction+"|"+strings.Join(g.queries, ",")] = true
	}
	if len(seen) < 10_000 {
		t.Fatalf("%d distinct instances among 12,000 train seeds", len(seen))
	}
}

func TestSolverFromAnyState(t *testing.T) {
	// After random play the solver still wins, given enough turns: it plans from the current page.
	c := shared()
	for seed := range uint64(300) {
		g, err := generate(c, proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 5))
		for range 8 {
			as := slices.DeleteFunc(g.admissible(), func(call proto.ToolCall) bool { return call == clickOf(linkBuyNow) })
			g.Step(as[rng.IntN(len(as))])
		}
		var r = g.Step(g.Solve())
		for n := 0; !r.Done; n++ {
			if n > 16 {
				t.Fatalf("seed %d: solver did not finish from a random state", seed)
			}
			if r = g.Step(g.Solve()); strings.Contains(r.Observation, "not admissible") {
				t.Fatalf("seed %d: solver call inadmissible: %s", seed, r.Observation)
			}
		}
		if r.Reward != 1 {
			t.Fatalf("seed %d: solver reward %v from a random state", seed, r.Reward)
		}
	}
}
