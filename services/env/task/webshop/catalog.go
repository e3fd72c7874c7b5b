package webshop

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Catalogue shape. Every word a title, attribute or option uses is a single token (no spaces or hyphens),
// so an option click names exactly one word of the instruction and titles stay short.
const (
	catalogSeed     = 0x77656273686f70 // "webshop": one catalogue for every instance and split
	perCategory     = 60               // of the 165 two- and three-attribute titles a category allows
	idAlphabet      = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
	maxResults      = 50 // WebShop shows the top 50 of a search
	resultsPageSize = 10
)

// optionDim is one option of a category (size, color, ...). Each product offers between min and max of
// its values; sizes are offered in full, so that goals of many products can name any size.
type optionDim struct {
	name     string
	values   []string
	min, max int
}

// category is one product type: its noun, department, attributes, options and price range in dollars.
type category struct {
	noun, dept       string
	attrs            []string
	dims             []optionDim
	priceLo, priceHi int
}

// product is one catalogue entry. Attributes are in category order and make up the title with the noun.
type product struct {
	id, title, brand string
	cat              int
	attrs            []string
	cents            int        // price, always ending in .99
	offers           [][]string // offered values of each of the category's dims, in dim order
}

// has reports whether the product has every attribute of want.
func (p *product) has(want []string) bool {
	for _, a := range want {
		if !slices.Contains(p.attrs, a) {
			return false
		}
	}
	return true
}

// offersValue reports whether dim d of the product offers value v.
func (p *product) offersValue(d int, v string) bool { return slices.Contains(p.offers[d], v) }

// catalog is the shop: products, their categories, a lookup by id and the search index. Read-only.
type catalog struct {
	cats     []category
	products []product
	byCat    [][]int
	byID     map[string]int // lowercased id → product
	index    *bm25
	wants    map[string]want // by wantKey: every one- and two-attribute goal a product can give rise to
}

// want is what a goal of one category and some of its attributes implies, computed once for the catalogue.
type want struct {
	query      string     // the attributes and the noun, the search the goal's words suggest
	satisfying []int      // the category's products with every one of the attributes
	maxCents   int        // the dearest of them
	common     [][]string // per dim, the values all of them offer
	// fair: the query shows a fitting product on its first page, and some dim has a value all fitting
	// products offer, so that any fitting product the agent opens can be bought exactly right.
	fair bool
}

// wantKey identifies a category noun and attributes (in category order).
func wantKey(noun string, attrs []string) string { return noun + "|" + strings.Join(attrs, " ") }

func colorDim(values ...string) optionDim {
	return optionDim{name: "color", values: values, min: len(values) - 2, max: len(values)}
}

func flavors(name string, values ...string) optionDim {
	return optionDim{name: name, values: values, min: len(values) - 2, max: len(values)}
}

func sized(values ...string) optionDim {
	return optionDim{name: "size", values: values, min: len(values), max: len(values)}
}

func shoeSizes() optionDim { return sized("5", "6", "7", "8", "9", "10", "11", "12", "13") }

func letterSizes() optionDim { return sized("small", "medium", "large", "xl", "xxl") }

// categories is the catalogue's table; a fresh value each call, never written.
func categories() []category {
	earth := []string{"black", "brown", "tan", "gray", "navy", "olive", "burgundy"}
	bright := []string{"black", "white", "navy", "red", "pink", "beige", "purple"}
	tech := []string{"black", "white", "gray", "blue", "red", "pink", "silver"}
	return []category{
		{"boots", "footwear", []string{"waterproof", "insulated", "leather", "suede", "lightweight", "cushioned", "vegan", "breathable", "hiking", "winter"}, []optionDim{shoeSizes(), colorDim(earth...)}, 45, 160},
		{"sneakers", "footwear", []string{"breathable", "lightweight", "cushioned", "vegan", "mesh", "knit", "wide", "orthopedic", "running", "walking"}, []optionDim{shoeSizes(), colorDim(bright...)}, 35, 140},
		{"sandals", "footwear", []string{"adjustable", "waterproof", "leather", "cushioned", "vegan", "orthopedic", "wide", "lightweight", "platform", "beach"}, []optionDim{shoeSizes(), colorDim(earth...)}, 20, 90},
		{"slippers", "footwear", []string{"fleece", "wool", "cushioned", "washable", "nonslip", "lightweight", "vegan", "warm", "moccasin", "plush"}, []optionDim{shoeSizes(), colorDim(bright...)}, 15, 60},
		{"shirt", "clothing", []string{"cotton", "linen", "slim", "relaxed", "breathable", "stretch", "organic", "flannel", "oxford", "striped"}, []optionDim{letterSizes(), colorDim(bright...)}, 15, 70},
		{"hoodie", "clothing", []string{"fleece", "cotton", "zip", "oversized", "organic", "lightweight", "recycled", "warm", "pullover", "athletic"}, []optionDim{letterSizes(), colorDim(earth...)}, 25, 90},
		{"jacket", "clothing", []string{"waterproof", "insulated", "packable", "windproof", "leather", "lightweight", "hooded", "recycled", "softshell", "reflective"}, []optionDim{letterSizes(), colorDim(earth...)}, 50, 220},
		{"jeans", "clothing", []string{"slim", "stretch", "relaxed", "bootcut", "skinny", "organic", "distressed", "straight", "ripped", "highrise"}, []optionDim{letterSizes(), colorDim("blue", "black", "gray", "white", "navy", "tan", "indigo")}, 25, 110},
		{"socks", "clothing", []string{"wool", "cotton", "cushioned", "compression", "breathable", "thermal", "seamless", "athletic", "ankle", "crew"}, []optionDim{sized("small", "medium", "large"), colorDim(bright...)}, 15, 40},
		{"headphones", "electronics", []string{"wireless", "bluetooth", "foldable", "waterproof", "gaming", "studio", "lightweight", "rechargeable", "overear", "sweatproof"}, []optionDim{colorDim(tech...)}, 20, 250},
		{"speaker", "electronics", []string{"portable", "waterproof", "bluetooth", "wireless", "rechargeable", "smart", "rugged", "compact", "outdoor", "stereo"}, []optionDim{colorDim(tech...)}, 25, 200},
		{"keyboard", "electronics", []string{"mechanical", "wireless", "backlit", "ergonomic", "compact", "bluetooth", "quiet", "gaming", "rgb", "hotswap"}, []optionDim{colorDim(tech...)}, 20, 160},
		{"mouse", "electronics", []string{"wireless", "ergonomic", "gaming", "bluetooth", "rechargeable", "silent", "compact", "vertical", "lightweight", "ambidextrous"}, []optionDim{colorDim(tech...)}, 15, 90},
		{"charger", "electronics", []string{"fast", "wireless", "portable", "compact", "magnetic", "foldable", "dual", "solar", "usbc", "travel"}, []optionDim{sized("20w", "30w", "65w", "100w"), colorDim("black", "white", "gray", "blue")}, 15, 80},
		{"coffee", "grocery", []string{"organic", "decaf", "arabica", "fairtrade", "ground", "instant", "robusta", "espresso", "colombian", "coldbrew"}, []optionDim{sized("12oz", "16oz", "24oz", "32oz"), flavors("flavor", "vanilla", "hazelnut", "caramel", "mocha", "cinnamon", "original")}, 15, 45},
		{"tea", "grocery", []string{"organic", "herbal", "decaf", "loose", "oolong", "chamomile", "jasmine", "unsweetened", "matcha", "detox"}, []optionDim{sized("2oz", "4oz", "8oz"), flavors("flavor", "lemon", "peach", "ginger", "honey", "berry", "mint")}, 15, 40},
		{"chocolate", "grocery", []string{"dark", "vegan", "organic", "sugarfree", "glutenfree", "keto", "almond", "bulk", "milk", "truffle"}, []optionDim{sized("3oz", "6oz", "12oz"), flavors("flavor", "caramel", "raspberry", "orange", "seasalt", "mint", "hazelnut")}, 15, 50},
		{"granola", "grocery", []string{"organic", "glutenfree", "vegan", "keto", "protein", "nutfree", "lowsugar", "crunchy", "clusters", "paleo"}, []optionDim{sized("12oz", "24oz", "32oz"), flavors("flavor", "honey", "cinnamon", "berry", "maple", "coconut", "vanilla")}, 15, 40},
		{"shampoo", "beauty", []string{"sulfatefree", "organic", "vegan", "moisturizing", "clarifying", "volumizing", "natural", "hypoallergenic", "antidandruff", "repairing"}, []optionDim{sized("8oz", "16oz", "32oz"), flavors("scent", "lavender", "coconut", "citrus", "rose", "eucalyptus", "mint")}, 15, 45},
		{"lotion", "beauty", []string{"moisturizing", "organic", "vegan", "hypoallergenic", "natural", "lightweight", "nongreasy", "sensitive", "firming", "soothing"}, []optionDim{sized("8oz", "16oz", "32oz"), flavors("scent", "lavender", "coconut", "citrus", "rose", "vanilla", "almond")}, 15, 40},
		{"toothpaste", "beauty", []string{"whitening", "fluoride", "natural", "vegan", "sensitive", "organic", "herbal", "enamel", "antiplaque", "kids"}, []optionDim{sized("4oz", "6oz"), flavors("flavor", "mint", "spearmint", "cinnamon", "peppermint", "wintergreen")}, 15, 30},
		{"backpack", "outdoor", []string{"waterproof", "lightweight", "padded", "laptop", "rugged", "expandable", "foldable", "recycled", "hiking", "travel"}, []optionDim{sized("20l", "30l", "40l", "50l"), colorDim(earth...)}, 25, 150},
		{"tent", "outdoor", []string{"waterproof", "lightweight", "instant", "ultralight", "insulated", "windproof", "compact", "family", "backpacking", "dome"}, []optionDim{sized("2person", "4person", "6person"), colorDim("green", "orange", "gray", "blue", "tan", "olive", "yellow")}, 60, 400},
		{"bottle", "outdoor", []string{"insulated", "stainless", "leakproof", "bpafree", "collapsible", "glass", "lightweight", "wide", "sports", "filtered"}, []optionDim{sized("18oz", "32oz", "40oz", "64oz"), colorDim(tech...)}, 15, 50},
		{"lamp", "home", []string{"dimmable", "led", "rechargeable", "smart", "portable", "wireless", "adjustable", "touch", "desk", "clip"}, []optionDim{colorDim("black", "white", "gray", "brass", "silver", "gold", "copper")}, 20, 120},
		{"pillow", "home", []string{"memoryfoam", "hypoallergenic", "cooling", "washable", "organic", "firm", "soft", "adjustable", "bamboo", "contour"}, []optionDim{sized("standard", "queen", "king")}, 20, 90},
		{"blanket", "home", []string{"fleece", "weighted", "cooling", "washable", "organic", "cotton", "wool", "oversized", "sherpa", "quilted"}, []optionDim{sized("twin", "queen", "king"), colorDim(bright...)}, 25, 150},
	}
}

// brands are shown on item pages only; they are not searched, so they never compete with the goal's words.
func brands() []string {
	return []string{"trailmax", "northpeak", "urbanfit", "soundwave", "brightleaf", "kestrel", "lumora", "oakridge",
		"pinecrest", "vantor", "zephyr", "halcyon", "marlow", "quillon", "rivelle", "solvik"}
}

// newCatalog builds the catalogue from catalogSeed: perCategory products of distinct attribute sets in every
// category, each with a price, a brand and the option values it offers.
func newCatalog() *catalog {
	rng := rand.New(rand.NewPCG(catalogSeed, 1))
	c := &catalog{cats: categories(), byID: map[string]int{}}
	c.byCat = make([][]int, len(c.cats))
	bs := brands()
	for ci, cat := range c.cats {
		combos := attrCombos(len(cat.attrs))
		rng.Shuffle(len(combos), func(i, j int) { combos[i], combos[j] = combos[j], combos[i] })
		for _, combo := range combos[:perCategory] {
			p := product{cat: ci, brand: bs[rng.IntN(len(bs))]}
			for _, a := range combo {
				p.attrs = append(p.attrs, cat.attrs[a])
			}
			p.title = strings.Join(append(slices.Clone(p.attrs), cat.noun), " ")
			p.cents = (cat.priceLo+rng.IntN(cat.priceHi-cat.priceLo+1))*100 + 99
			for _, d := range cat.dims {
				p.offers = append(p.offers, offer(rng, d))
			}
			for {
				p.id = newID(rng)
				if _, dup := c.byID[strings.ToLower(p.id)]; !dup {
					break
				}
			}
			c.byID[strings.ToLower(p.id)] = len(c.products)
			c.byCat[ci] = append(c.byCat[ci], len(c.products))
			c.products = append(c.products, p)
		}
	}
	docs := make([][]string, len(c.products))
	for i, p := range c.products {
		docs[i] = append(words(p.title), p.attrs...) // title and attributes, as WebShop indexes both
	}
	c.index = newBM25(docs)
	c.wants = map[string]want{}
	for _, p := range c.products {
		for i, a := range p.attrs {
			c.addWant(p.cat, []string{a})
			for _, b := range p.attrs[i+1:] {
				c.addWant(p.cat, []string{a, b})
			}
		}
	}
	return c
}

// addWant computes the want of category ci and attrs, unless known.
func (c *catalog) addWant(ci int, attrs []string) {
	cat := &c.cats[ci]
	key := wantKey(cat.noun, attrs)
	if _, ok := c.wants[key]; ok {
		return
	}
	w := want{query: strings.Join(attrs, " ") + " " + cat.noun, common: make([][]string, len(cat.dims))}
	for _, q := range c.byCat[ci] {
		if c.products[q].has(attrs) {
			w.satisfying = append(w.satisfying, q)
			w.maxCents = max(w.maxCents, c.products[q].cents)
		}
	}
	anyCommon := false
	for d, dim := range cat.dims {
		for _, v := range dim.values {
			if !slices.ContainsFunc(w.satisfying, func(q int) bool { return !c.products[q].offersValue(d, v) }) {
				w.common[d] = append(w.common[d], v)
				anyCommon = true
			}
		}
	}
	first := c.search(w.query)
	w.fair = anyCommon && slices.ContainsFunc(first[:min(len(first), resultsPageSize)], func(q int) bool {
		return slices.Contains(w.satisfying, q)
	})
	c.wants[key] = w
}

// attrCombos lists the index sets of two and three of n attributes, in lexicographic order.
func attrCombos(n int) [][]int {
	var out [][]int
	for a := range n {
		for b := a + 1; b < n; b++ {
			out = append(out, []int{a, b})
			for c := b + 1; c < n; c++ {
				out = append(out, []int{a, b, c})
			}
		}
	}
	return out
}

// offer draws the values of one dim a product offers, in the dim's order.
func offer(rng *rand.Rand, d optionDim) []string {
	n := d.min + rng.IntN(d.max-d.min+1)
	pick := rng.Perm(len(d.values))[:n]
	slices.Sort(pick)
	out := make([]string, n)
	for i, k := range pick {
		out[i] = d.values[k]
	}
	return out
}

// newID draws an Amazon-like id, "B0" and eight letters or digits.
func newID(rng *rand.Rand) string {
	b := []byte("B0")
	for range 8 {
		b = append(b, idAlphabet[rng.IntN(len(idAlphabet))])
	}
	return string(b)
}

// price renders cents as dollars, "$45.99".
func price(cents int) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

// dimOf finds which dim of category ci offers value v, or -1.
func (c *catalog) dimOf(ci int, v string) int {
	for d, dim := range c.cats[ci].dims {
		if slices.Contains(dim.values, v) {
			return d
		}
	}
	return -1
}

// search ranks the catalogue for keywords and keeps the top maxResults.
func (c *catalog) search(keywords string) []int {
	r := c.index.rank(words(keywords))
	return r[:min(len(r), maxResults)]
}
