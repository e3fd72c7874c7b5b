// Package webshop is an online shop after WebShop (AgentBench, function-call version): find and buy the
// product an instruction describes in a generated catalogue, with two tools, search_action (BM25 over
// titles and attributes) and click_action (results, item pages, options, "buy now"). The reward is
// WebShop's: the share of the goal's attributes, options and price limit that the purchase meets, times a
// product-type match, so it is fractional; an episode succeeds when it is 1.
package webshop

import (
	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// The family's name, turn limit and tools, as in AgentBench.
const (
	Name       = "webshop"
	MaxTurns   = 20
	SearchTool = "search_action"
	ClickTool  = "click_action"
)

const (
	searchParameters = `{"type":"object","properties":{"keywords":{"type":"string","description":"Search keywords, e.g. \"waterproof leather boots\". Only available on the search page."}},"required":["keywords"]}`
	clickParameters  = `{"type":"object","properties":{"target":{"type":"string","description":"What to click on the current page, exactly as listed: an item's title or id on a results page, an option value on an item page, \"next >\", \"< prev\", \"back to search\" or \"buy now\"."}},"required":["target"]}`
)

// Family generates webshop instances over one catalogue, built once and only read afterwards, so one
// value serves any number of goroutines.
type Family struct {
	cat *catalog
}

// New returns the webshop family with its catalogue.
func New() *Family { return &Family{cat: newCatalog()} }

// Name is "webshop".
func (*Family) Name() string { return Name }

// MaxTurns is 20, AgentBench's limit for WebShop.
func (*Family) MaxTurns() int { return MaxTurns }

// Tools are search_action and click_action, in a fresh slice so callers cannot change another's.
func (*Family) Tools() []proto.Tool {
	return []proto.Tool{
		{
			Name:        SearchTool,
			Description: "Search the shop for products matching the keywords; shows the first page of results (10 per page, with item ids, titles and prices).",
			Parameters:  searchParameters,
		},
		{
			Name:        ClickTool,
			Description: "Click something on the current page: an item (its title or id) to open it, an option value to select it, \"next >\" or \"< prev\" to change pages, \"back to search\", or \"buy now\" to buy the open item and end the episode.",
			Parameters:  clickParameters,
		},
	}
}

// New generates the instance of (split, seed). Held-out instances are those whose instruction hashes to 0
// modulo 5; the opening shows only the instruction and the fixed search page, so no instance is in both.
func (f *Family) New(split string, seed uint64) (task.Instance, error) {
	if err := task.ValidSplit(split); err != nil {
		return nil, err
	}
	return generate(f.cat, split, seed)
}
