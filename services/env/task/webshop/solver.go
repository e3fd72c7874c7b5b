package webshop

import (
	"slices"

	"github.com/jetrl/jetrl/proto"
)

// Solve is the scripted expert: it searches the goal's query, opens a product with the goal's type and
// attributes (found by reading the results, paging if need be), selects the goal's options and buys.
// From a detour it walks back: off-goal item pages to the results, results without a fitting product to
// the search page.
func (g *game) Solve() proto.ToolCall {
	switch {
	case g.done:
		return clickOf(linkBuyNow)
	case g.page == pageSearch:
		return callOf(SearchTool, "keywords", g.goal.query)
	case g.page == pageItem:
		if !g.goal.fits(g.item) {
			return clickOf(linkPrev)
		}
		for _, o := range g.goal.opts {
			if g.chosen[o.dim] != o.value {
				return clickOf(o.value)
			}
		}
		return clickOf(linkBuyNow)
	}
	if i := slices.IndexFunc(g.onPage(), g.goal.fits); i >= 0 {
		return clickOf(g.cat.products[g.onPage()[i]].title)
	}
	at := slices.IndexFunc(g.results, g.goal.fits)
	switch {
	case at < 0:
		return clickOf(linkBack)
	case at/resultsPageSize > g.pageNo:
		return clickOf(linkNext)
	}
	return clickOf(linkPrev)
}
