package webshop

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// page is where the agent is.
type page int

const (
	pageSearch page = iota
	pageResults
	pageItem
)

// The fixed links, as the agent writes them.
const (
	linkNext   = "next >"
	linkPrev   = "< prev"
	linkBack   = "back to search"
	linkBuyNow = "buy now"
)

const searchView = "WebShop search page. Search the shop with search_action and a few keywords."

// game is one instance: the goal, the search candidates and the agent's place in the shop. The catalogue
// is shared and only read; everything else belongs to the instance.
type game struct {
	cat     *catalog
	goal    goal
	queries []string
	page    page
	query   string
	results []int    // ranked products of the last search
	pageNo  int      // results page, from 0
	item    int      // the open item, on the item page
	chosen  []string // the open item's selected value per dim, "" for none
	done    bool
	final   task.Result
	opening task.Opening
}

func (g *game) open() task.Opening {
	return task.Opening{Instruction: g.goal.instruction, Observation: searchView, Admissible: g.admissible()}
}

// Start returns the opening; the slices are the caller's own.
func (g *game) Start() task.Opening {
	o := g.opening
	o.Admissible = slices.Clone(o.Admissible)
	return o
}

// Step applies one call; bad calls and inadmissible clicks explain themselves and cost only the turn.
func (g *game) Step(call proto.ToolCall) task.Result {
	if g.done {
		r := g.final
		r.Metrics = maps.Clone(r.Metrics)
		return r
	}
	tool, arg, err := parseCall(call)
	if err != nil {
		return g.running(err.Error(), true)
	}
	if tool == SearchTool {
		if g.page != pageSearch {
			return g.running(`search_action is not admissible here: the search bar is only on the search page; click "back to search" first.`, true)
		}
		g.query, g.results, g.pageNo, g.page = arg, g.cat.search(arg), 0, pageResults
		return g.running(g.view(), false)
	}
	obs, ok := g.click(arg)
	if g.done {
		return g.final
	}
	return g.running(obs, !ok)
}

func (g *game) running(obs string, invalid bool) task.Result {
	r := task.Result{Observation: obs, Admissible: g.admissible(), Status: proto.StatusRunning}
	if invalid {
		r.Metrics = map[string]float64{"invalid_call": 1}
	}
	return r
}

// click follows a link of the current page; ok is false when there is no such link.
func (g *game) click(target string) (string, bool) {
	t := normalize(target)
	no := func(why string) (string, bool) {
		return fmt.Sprintf("%q is not admissible here: %s.", target, why), false
	}
	switch g.page {
	case pageSearch:
		return no("the search page has nothing to click; search with search_action")
	case pageResults:
		switch t {
		case linkNext:
			if !g.hasNext() {
				return no("this is the last page of results")
			}
			g.pageNo++
			return g.view(), true
		case linkPrev:
			if g.pageNo == 0 {
				return no("this is the first page of results")
			}
			g.pageNo--
			return g.view(), true
		case linkBack:
			g.page = pageSearch
			return searchView, true
		case linkBuyNow:
			return no("open an item first")
		}
		for _, q := range g.onPage() {
			p := &g.cat.products[q]
			if t == strings.ToLower(p.id) || t == p.title {
				g.page, g.item, g.chosen = pageItem, q, make([]string, len(p.offers))
				return g.view(), true
			}
		}
		return no("no item or link on this page has that title or id")
	}
	p := &g.cat.products[g.item]
	switch t {
	case linkBuyNow:
		g.buy()
		return "", true
	case linkPrev:
		g.page = pageResults
		return g.view(), true
	case linkBack:
		g.page = pageSearch
		return searchView, true
	case linkNext:
		return no(`an item page has no next page; "< prev" returns to the results`)
	}
	for d, vs := range p.offers {
		if slices.Contains(vs, t) {
			g.chosen[d] = t
			return fmt.Sprintf("You selected %s %s.\n%s", g.cat.cats[p.cat].dims[d].name, t, g.view()), true
		}
	}
	return no("this item offers no such option, and the page has no such link")
}

// buy ends the episode with WebShop's reward for the open item and the selected options.
func (g *game) buy() {
	p := &g.cat.products[g.item]
	s := g.cat.reward(g.goal, g.item, g.chosen)
	g.done = true
	g.final = task.Result{
		Observation: fmt.Sprintf("You bought [%s] %s%s for %s. Thank you for shopping! Your %s.", p.id, p.title, g.selection(" with "), price(p.cents), s),
		Done:        true,
		Reward:      s.reward,
		Status:      proto.StatusCompleted,
		Metrics: map[string]float64{
			"reward_type":   s.typ,
			"reward_attr":   frac(s.attrs, s.nAttrs),
			"reward_option": frac(s.opts, s.nOpts),
			"reward_price":  frac(b2i(s.priceOK), 1),
		},
	}
}

func frac(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// normalize forgives case, spacing, the brackets WebShop puts around clickables and short forms of links.
func normalize(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	switch s {
	case "next", "next page", "next>":
		return linkNext
	case "prev", "previous", "<prev", "< previous", "previous page", "prev <":
		return linkPrev
	case "back", "search", "back to search page":
		return linkBack
	case "buy", "buy it", "buy now!":
		return linkBuyNow
	}
	return s
}

// hasNext reports whether the results go on past this page.
func (g *game) hasNext() bool { return (g.pageNo+1)*resultsPageSize < len(g.results) }

// onPage lists the products of the current results page.
func (g *game) onPage() []int {
	lo := min(g.pageNo*resultsPageSize, len(g.results))
	return g.results[lo:min(lo+resultsPageSize, len(g.results))]
}

// view renders the current page.
func (g *game) view() string {
	var b strings.Builder
	switch g.page {
	case pageSearch:
		return searchView
	case pageResults:
		if len(g.results) == 0 {
			return fmt.Sprintf("No results for %q. Click \"back to search\" to try other keywords.", g.query)
		}
		pages := (len(g.results) + resultsPageSize - 1) / resultsPageSize
		fmt.Fprintf(&b, "Results for %q, page %d of %d (%d items):\n", g.query, g.pageNo+1, pages, len(g.results))
		for _, q := range g.onPage() {
			p := &g.cat.products[q]
			fmt.Fprintf(&b, "[%s] %s, %s\n", p.id, p.title, price(p.cents))
		}
		b.WriteString(`Click an item's title or id to open it, "next >" or "< prev" to change pages, or "back to search".`)
		return b.String()
	}
	p := &g.cat.products[g.item]
	cat := g.cat.cats[p.cat]
	fmt.Fprintf(&b, "[%s] %s\nbrand: %s\nprice: %s\nattributes: %s\n", p.id, p.title, p.brand, price(p.cents), strings.Join(p.attrs, ", "))
	for d, vs := range p.offers {
		fmt.Fprintf(&b, "%s: %s\n", cat.dims[d].name, strings.Join(vs, ", "))
	}
	sel := g.selection("")
	if sel == "" {
		sel = "none"
	}
	fmt.Fprintf(&b, "selected: %s\n", sel)
	b.WriteString(`Click an option value to select it, "buy now" to buy, "< prev" for the results, or "back to search".`)
	return b.String()
}

// selection lists the open item's selected options after prefix, or "" when none is selected.
func (g *game) selection(prefix string) string {
	dims := g.cat.cats[g.cat.products[g.item].cat].dims
	var parts []string
	for d, v := range g.chosen {
		if v != "" {
			parts = append(parts, dims[d].name+" "+v)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return prefix + strings.Join(parts, ", ")
}

// admissible lists the calls that do something now: the search candidates on the search page, the items
// and page links on a results page, the option values not yet selected and the links on an item page.
func (g *game) admissible() []proto.ToolCall {
	if g.done {
		return nil
	}
	var out []proto.ToolCall
	switch g.page {
	case pageSearch:
		for _, q := range g.queries {
			out = append(out, callOf(SearchTool, "keywords", q))
		}
	case pageResults:
		for _, q := range g.onPage() {
			out = append(out, clickOf(g.cat.products[q].title))
		}
		if g.hasNext() {
			out = append(out, clickOf(linkNext))
		}
		if g.pageNo > 0 {
			out = append(out, clickOf(linkPrev))
		}
		out = append(out, clickOf(linkBack))
	case pageItem:
		for d, vs := range g.cat.products[g.item].offers {
			for _, v := range vs {
				if v != g.chosen[d] { // selecting the selected value again does nothing
					out = append(out, clickOf(v))
				}
			}
		}
		out = append(out, clickOf(linkBuyNow), clickOf(linkPrev), clickOf(linkBack))
	}
	return out
}

// clickOf is the click_action call of one target.
func clickOf(target string) proto.ToolCall { return callOf(ClickTool, "target", target) }

// callOf is the call of a tool with one string argument.
func callOf(tool, key, value string) proto.ToolCall {
	b, _ := json.Marshal(map[string]string{key: value}) // a map of strings always marshals
	return proto.ToolCall{Name: tool, Arguments: string(b)}
}

// parseCall extracts a call's tool and its one string argument, or says what is wrong with the call.
func parseCall(call proto.ToolCall) (tool, arg string, err error) {
	var key string
	switch call.Name {
	case SearchTool:
		key = "keywords"
	case ClickTool:
		key = "target"
	default:
		return "", "", fmt.Errorf("unknown tool %q; available: %s, %s", call.Name, SearchTool, ClickTool)
	}
	example := fmt.Sprintf(`{"%s": "..."}`, key)
	raw := strings.TrimSpace(call.Arguments)
	if raw == "" {
		return "", "", fmt.Errorf("bad arguments: empty; want a JSON object like %s", example)
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &args); err != nil || args == nil {
		return "", "", fmt.Errorf("bad arguments: not a JSON object (%v); want %s", err, example)
	}
	v, ok := args[key]
	if !ok {
		return "", "", fmt.Errorf("bad arguments: missing required %q", key)
	}
	for k := range args {
		if k != key {
			return "", "", fmt.Errorf("bad arguments: unknown argument %q; %s takes only %q", k, call.Name, key)
		}
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", "", fmt.Errorf("bad arguments: %q must be a string, got %s", key, v)
	}
	if strings.TrimSpace(s) == "" {
		return "", "", fmt.Errorf("bad arguments: %q is empty", key)
	}
	return call.Name, s, nil
}
