package db

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/jetrl/jetrl/proto"
)

// Generation bounds. Exploring shows exploreRows rows, so answers hide in the rows after them.
const (
	minRows        = 8
	maxRows        = 30
	exploreRows    = 5
	maxExploreAns  = 3 // values of the asked column offered as (wrong) answers once a table is seen
	minWrong       = 4 // fewest wrong statements a goal must offer
	maxAttempts    = 10_000
	heldoutModulus = 5
)

// Hints that follow every question; they name the SQL words the right statement uses besides the
// question's own, as DBBench's prompt shows the statement format.
const (
	queryHint    = "Use execute_sql to run SQL (SELECT ... FROM ... WHERE ...), then commit_final_answer with the answer as a comma-separated list of values."
	mutationHint = "Use execute_sql to run SQL (SELECT ... FROM ... WHERE ...) that makes the change, then commit_final_answer done."
)

// table is one generated table: its theme and rows, one cell per theme column (the id is the row's
// position + 1).
type table struct {
	theme theme
	rows  [][]string
}

// kind is a goal's type.
type kind int

const (
	kLookup kind = iota
	kList
	kCount
	kSum
	kAvg
	kMax
	kMin
	kUpdate
	kInsert
	kDelete
	kHop // list rows sharing a value with a named row: the second query's condition is the first's result
	numKinds
)

// String names the kind, for tests and metrics.
func (k kind) String() string {
	return [...]string{"lookup", "list", "count", "sum", "avg", "max", "min", "update", "insert", "delete", "hop"}[k]
}

// mutation reports whether the goal is a change checked by the table's digest.
func (k kind) mutation() bool { return k == kUpdate || k == kInsert || k == kDelete }

// kindWeights make questions about 70% of the goals.
func kindWeights() [numKinds]int { return [numKinds]int{3, 3, 2, 2, 2, 2, 2, 3, 2, 2, 3} }

// goal is what an instance asks, with the right statement and its wrong variants.
type goal struct {
	kind     kind
	table    int // index of the asked table
	question string
	first    string // kHop: the query whose result names the right statement's condition value
	right    string
	wrong    []string
	answer   []string // query goals: the expected values
	decoys   []string // query goals: values of the asked column in the explored rows, all wrong
	wantHash string   // mutation goals: digest of the asked table after the change
}

// splitStream separates the random streams of the two splits, so seed 7 of train and of heldout differ.
func splitStream(split string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("db/" + split))
	return h.Sum64()
}

// dbName names a session's database uniquely within the process.
func dbName(split string, seed, n uint64) string {
	return fmt.Sprintf("db-%s-%d-%d", split, seed, n)
}

// generate draws the instance of (split, seed): tables and a goal whose opening falls in the split.
func generate(split string, seed uint64) (*game, error) {
	rng := rand.New(rand.NewPCG(seed, splitStream(split)))
	wantHeldout := split == proto.SplitHeldout
	for range maxAttempts {
		g, ok := draw(rng)
		if !ok {
			continue
		}
		if (g.splitKey()%heldoutModulus == 0) != wantHeldout {
			continue
		}
		g.finish(rng)
		return g, nil
	}
	return nil, errors.New("db: no instance found for this split and seed")
}

// splitKey hashes everything the opening shows.
func (g *game) splitKey() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\n%s", g.instruction, g.observation)
	return h.Sum64()
}

// draw makes one or two tables and a goal on one of them; ok is false when the data cannot host the
// drawn goal (the caller draws again).
func draw(rng *rand.Rand) (*game, bool) {
	all := themes()
	nt := 1 + rng.IntN(2)
	tables := make([]table, nt)
	for i, p := range rng.Perm(len(all))[:nt] {
		tables[i] = makeTable(rng, all[p])
	}
	target := rng.IntN(nt)
	gl, ok := makeGoal(rng, pickKind(rng), tables, target)
	if !ok {
		return nil, false
	}
	g := &game{tables: tables, goal: gl}
	hint := queryHint
	if gl.kind.mutation() {
		hint = mutationHint
	}
	g.instruction = gl.question + " " + hint
	names := make([]string, nt)
	for i, t := range tables {
		names[i] = fmt.Sprintf("%s (%d rows)", t.theme.table, len(t.rows))
	}
	noun := "tables"
	if nt == 1 {
		noun = "table"
	}
	g.observation = fmt.Sprintf("The database has %d %s: %s.", nt, noun, strings.Join(names, ", "))
	return g, true
}

func pickKind(rng *rand.Rand) kind {
	w := kindWeights()
	total := 0
	for _, x := range w {
		total += x
	}
	n := rng.IntN(total)
	for k, x := range w {
		if n < x {
			return kind(k)
		}
		n -= x
	}
	return kLookup
}

// makeTable fills a theme with minRows..maxRows rows; each text column uses 3–5 of its pool's values.
func makeTable(rng *rand.Rand, th theme) table {
	n := minRows + rng.IntN(maxRows-minRows+1)
	t := table{theme: th, rows: make([][]string, n)}
	subsets := make([][]string, len(th.cols))
	for c, col := range th.cols {
		if col.kind == colCat {
			pool := slices.Clone(col.pool)
			rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
			subsets[c] = pool[:3+rng.IntN(3)]
		}
	}
	used := map[string]bool{}
	for i := range t.rows {
		row := make([]string, len(th.cols))
		for c, col := range th.cols {
			switch col.kind {
			case colKey:
				row[c] = freshKey(rng, th.key, used)
			case colCat:
				row[c] = subsets[c][rng.IntN(len(subsets[c]))]
			case colNum:
				row[c] = randNum(rng, col)
			}
		}
		t.rows[i] = row
	}
	return t
}

// freshKey draws a key value not yet in used and records it.
func freshKey(rng *rand.Rand, style keyStyle, used map[string]bool) string {
	for {
		var k string
		switch style {
		case keyPerson:
			f, l := firstNames(), lastNames()
			k = f[rng.IntN(len(f))] + " " + l[rng.IntN(len(l))]
		case keyTitle:
			a, n := titleWords()
			k = a[rng.IntN(len(a))] + " " + n[rng.IntN(len(n))]
		case keyThing:
			m, o := thingWords()
			k = m[rng.IntN(len(m))] + " " + o[rng.IntN(len(o))]
		default:
			const letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
			k = fmt.Sprintf("%c%c%d", letters[rng.IntN(len(letters))], letters[rng.IntN(len(letters))], 1000+rng.IntN(9000))
		}
		if !used[k] {
			used[k] = true
			return k
		}
	}
}

func randNum(rng *rand.Rand, col colSpec) string {
	return strconv.Itoa(col.lo + col.step*rng.IntN((col.hi-col.lo)/col.step+1))
}

// builder assembles one goal on table t, with the other table (if any) for wrong-table variants.
type builder struct {
	rng   *rand.Rand
	t     table
	other *table
}

func (b builder) th() theme        { return b.t.theme }
func (b builder) col(c int) string { return b.t.theme.cols[c].name }
func (b builder) isNum(c int) bool { return b.t.theme.cols[c].kind == colNum }
func (b builder) lit(c int, v string) string {
	if b.isNum(c) {
		return v
	}
	return quoteText(v)
}

// cols lists the theme's columns of kind k.
func (b builder) cols(k colKind) []int {
	var out []int
	for c, col := range b.t.theme.cols {
		if col.kind == k {
			out = append(out, c)
		}
	}
	return out
}

// nonKey lists every column but the key, except those in skip.
func (b builder) nonKey(skip ...int) []int {
	var out []int
	for c, col := range b.t.theme.cols {
		if col.kind != colKey && !slices.Contains(skip, c) {
			out = append(out, c)
		}
	}
	return out
}

// pick returns up to n distinct elements of xs in random order.
func pick[T any](rng *rand.Rand, xs []T, n int) []T {
	xs = slices.Clone(xs)
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs[:min(n, len(xs))]
}

// selectWhere is "SELECT sel FROM table WHERE col = lit".
func selectWhere(sel, tbl, col, lit string) string {
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", sel, tbl, col, lit)
}

// groups maps each value of column c to the rows holding it, with the values in first-seen order.
func (b builder) groups(c int) (map[string][]int, []string) {
	m := map[string][]int{}
	var order []string
	for i, row := range b.t.rows {
		if _, ok := m[row[c]]; !ok {
			order = append(order, row[c])
		}
		m[row[c]] = append(m[row[c]], i)
	}
	return m, order
}

// filter picks a text column and a value held by between lo and hi rows.
func (b builder) filter(lo, hi int) (f int, v string, ok bool) {
	for _, f := range pick(b.rng, b.cols(colCat), 2) {
		m, order := b.groups(f)
		for _, v := range pick(b.rng, order, len(order)) {
			if n := len(m[v]); n >= lo && n <= hi {
				return f, v, true
			}
		}
	}
	return 0, "", false
}

// otherValues are up to n values of column c in the table other than v.
func (b builder) otherValues(c int, v string, n int) []string {
	_, order := b.groups(c)
	return pick(b.rng, slices.DeleteFunc(order, func(x string) bool { return x == v }), n)
}

// swapFilter is a wrong WHERE on another text column with one of its values.
func (b builder) swapFilter(sel string, f int) (string, bool) {
	others := slices.DeleteFunc(b.cols(colCat), func(c int) bool { return c == f })
	if len(others) == 0 {
		return "", false
	}
	f2 := others[b.rng.IntN(len(others))]
	v2 := b.t.rows[b.rng.IntN(len(b.t.rows))][f2]
	return selectWhere(sel, b.th().table, b.col(f2), quoteText(v2)), true
}

// otherTable is stmt with the asked table's name replaced by the other table's, if there is one.
func (b builder) otherTable(stmt string) []string {
	if b.other == nil {
		return nil
	}
	return []string{strings.Replace(stmt, " "+b.th().table, " "+b.other.theme.table, 1)}
}

// makeGoal builds a goal of kind k on tables[target]; ok is false when the data cannot host it.
func makeGoal(rng *rand.Rand, k kind, tables []table, target int) (goal, bool) {
	b := builder{rng: rng, t: tables[target]}
	if len(tables) == 2 {
		b.other = &tables[1-target]
	}
	var gl goal
	var ok bool
	switch k {
	case kLookup:
		gl, ok = b.lookup()
	case kList:
		gl, ok = b.list()
	case kCount, kSum, kAvg, kMax, kMin:
		gl, ok = b.aggregate(k)
	case kUpdate:
		gl, ok = b.update()
	case kInsert:
		gl, ok = b.insert()
	case kDelete:
		gl, ok = b.delete()
	case kHop:
		gl, ok = b.hop()
	}
	if !ok {
		return goal{}, false
	}
	gl.kind, gl.table = k, target
	hint := queryHint
	if k.mutation() {
		hint = mutationHint
	}
	gl.wrong = pruneWrong(gl.right, gl.wrong, gl.question+" "+hint)
	if gl.first != "" {
		gl.wrong = slices.DeleteFunc(gl.wrong, func(s string) bool { return s == gl.first })
	}
	if len(gl.wrong) < minWrong {
		return goal{}, false
	}
	return gl, true
}

// pruneWrong drops duplicates of the right statement and wrong statements whose every word occurs in the
// instruction: such a statement would be told from the right one by nothing the question says.
func pruneWrong(right string, wrong []string, instruction string) []string {
	inst := map[string]bool{}
	for _, w := range words(instruction) {
		inst[w] = true
	}
	var out []string
	for _, s := range wrong {
		if s == right || slices.Contains(out, s) {
			continue
		}
		covered := true
		for _, w := range words(s) {
			if !inst[w] {
				covered = false
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	return out
}

// words splits text as the built-in policy does: lower-cased runs of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	})
}

// decoys are the asked column's values in the first rows (those exploring shows), when none of them is
// the answer; ok is false when one is, so that only the revealing query reveals the answer.
func (b builder) decoys(c int, answer []string) ([]string, bool) {
	var out []string
	for _, row := range b.t.rows[:exploreRows] {
		v := row[c]
		if len(answer) == 1 && sameValue(v, answer[0]) {
			return nil, false
		}
		if !slices.Contains(out, v) && len(out) < maxExploreAns {
			out = append(out, v)
		}
	}
	return out, true
}

func (b builder) lookup() (goal, bool) {
	th, n := b.th(), len(b.t.rows)
	r := exploreRows + b.rng.IntN(n-exploreRows)
	nums := b.cols(colNum)
	c := nums[b.rng.IntN(len(nums))]
	key := b.t.rows[r][0]
	gl := goal{
		question: fmt.Sprintf("In the %s table, what is the %s of the %s whose %s is %s?", th.table, b.col(c), th.entity, b.col(0), key),
		right:    selectWhere(b.col(c), th.table, b.col(0), quoteText(key)),
		answer:   []string{b.t.rows[r][c]},
	}
	for _, c2 := range pick(b.rng, b.nonKey(c), 2) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(c2), th.table, b.col(0), quoteText(key)))
	}
	for _, k2 := range b.otherValues(0, key, 2) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(c), th.table, b.col(0), quoteText(k2)))
	}
	gl.wrong = append(gl.wrong, selectWhere("COUNT(*)", th.table, b.col(0), quoteText(key)))
	cats := b.cols(colCat)
	gl.wrong = append(gl.wrong, selectWhere(b.col(c), th.table, b.col(cats[b.rng.IntN(len(cats))]), quoteText(key)))
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	var ok bool
	gl.decoys, ok = b.decoys(c, gl.answer)
	return gl, ok
}

func (b builder) list() (goal, bool) {
	th := b.th()
	f, v, ok := b.filter(2, 6)
	if !ok {
		return goal{}, false
	}
	c := 0
	if b.rng.IntN(10) >= 7 {
		nums := b.cols(colNum)
		c = nums[b.rng.IntN(len(nums))]
	}
	m, _ := b.groups(f)
	var answer []string
	for _, r := range m[v] {
		if !slices.Contains(answer, b.t.rows[r][c]) {
			answer = append(answer, b.t.rows[r][c])
		}
	}
	if len(answer) < 2 {
		return goal{}, false
	}
	gl := goal{
		question: fmt.Sprintf("In the %s table, list the %s of every %s whose %s is %s.", th.table, b.col(c), th.entity, b.col(f), v),
		right:    selectWhere(b.col(c), th.table, b.col(f), quoteText(v)),
		answer:   answer,
	}
	for _, c2 := range pick(b.rng, slices.DeleteFunc(append(b.nonKey(f), 0), func(x int) bool { return x == c }), 2) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(c2), th.table, b.col(f), quoteText(v)))
	}
	for _, v2 := range b.otherValues(f, v, 2) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(c), th.table, b.col(f), quoteText(v2)))
	}
	if s, ok := b.swapFilter(b.col(c), f); ok {
		gl.wrong = append(gl.wrong, s)
	}
	gl.wrong = append(gl.wrong, selectWhere("COUNT(*)", th.table, b.col(f), quoteText(v)))
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	gl.decoys, ok = b.decoys(c, gl.answer)
	return gl, ok
}

func (b builder) hop() (goal, bool) {
	th := b.th()
	cats := b.cols(colCat)
	f := cats[b.rng.IntN(len(cats))]
	m, order := b.groups(f)
	x, r := "", -1
	for _, v := range pick(b.rng, order, len(order)) {
		late := slices.DeleteFunc(slices.Clone(m[v]), func(i int) bool { return i < exploreRows })
		if n := len(m[v]); n >= 2 && n <= 6 && len(late) > 0 {
			x, r = v, late[b.rng.IntN(len(late))]
			break
		}
	}
	if r < 0 {
		return goal{}, false
	}
	c := 0
	if b.rng.IntN(10) >= 7 {
		nums := b.cols(colNum)
		c = nums[b.rng.IntN(len(nums))]
	}
	var answer []string
	for _, i := range m[x] {
		if !slices.Contains(answer, b.t.rows[i][c]) {
			answer = append(answer, b.t.rows[i][c])
		}
	}
	if len(answer) < 2 {
		return goal{}, false
	}
	key := b.t.rows[r][0]
	gl := goal{
		question: fmt.Sprintf("In the %s table, list the %s of every %s whose %s is the same as that of the %s whose %s is %s.",
			th.table, b.col(c), th.entity, b.col(f), th.entity, b.col(0), key),
		first:  selectWhere(b.col(f), th.table, b.col(0), quoteText(key)),
		right:  selectWhere(b.col(c), th.table, b.col(f), quoteText(x)),
		answer: answer,
	}
	for _, v := range order {
		if v != x {
			gl.wrong = append(gl.wrong, selectWhere(b.col(c), th.table, b.col(f), quoteText(v)))
		}
	}
	for _, f2 := range pick(b.rng, slices.DeleteFunc(b.nonKey(), func(x int) bool { return x == f }), 1) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(f2), th.table, b.col(0), quoteText(key)))
	}
	for _, k2 := range b.otherValues(0, key, 1) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(f), th.table, b.col(0), quoteText(k2)))
	}
	for _, c2 := range pick(b.rng, slices.DeleteFunc(append(b.nonKey(f), 0), func(x int) bool { return x == c }), 1) {
		gl.wrong = append(gl.wrong, selectWhere(b.col(c2), th.table, b.col(f), quoteText(x)))
	}
	gl.wrong = append(gl.wrong, b.otherTable(gl.first)...)
	var ok bool
	gl.decoys, ok = b.decoys(c, gl.answer)
	return gl, ok
}

// aggWord is the SQL function of an aggregate kind, also the word its question uses.
func aggWord(k kind) string {
	switch k {
	case kCount:
		return "COUNT"
	case kSum:
		return "SUM"
	case kAvg:
		return "AVG"
	case kMax:
		return "MAX"
	}
	return "MIN"
}

func (b builder) aggregate(k kind) (goal, bool) {
	th := b.th()
	lo := 2
	if k == kCount {
		lo = 1
	}
	f, v, ok := b.filter(lo, len(b.t.rows))
	if !ok {
		return goal{}, false
	}
	m, _ := b.groups(f)
	rows := m[v]
	nums := b.cols(colNum)
	n := nums[b.rng.IntN(len(nums))]
	where := func(sel string) string { return selectWhere(sel, th.table, b.col(f), quoteText(v)) }
	agg := func(k kind, c int) string {
		if k == kCount {
			return "COUNT(*)"
		}
		return aggWord(k) + "(" + b.col(c) + ")"
	}
	gl := goal{right: where(agg(k, n))}
	whose := fmt.Sprintf("the %s rows whose %s is %s", th.entity, b.col(f), v)
	switch k {
	case kCount:
		gl.question = fmt.Sprintf("In the %s table, count %s.", th.table, whose)
		gl.answer = []string{strconv.Itoa(len(rows))}
	case kSum:
		gl.question = fmt.Sprintf("In the %s table, what is the sum of %s over %s?", th.table, b.col(n), whose)
	case kAvg:
		gl.question = fmt.Sprintf("In the %s table, what is the avg %s of %s?", th.table, b.col(n), whose)
	case kMax:
		gl.question = fmt.Sprintf("In the %s table, what is the max %s among %s?", th.table, b.col(n), whose)
	case kMin:
		gl.question = fmt.Sprintf("In the %s table, what is the min %s among %s?", th.table, b.col(n), whose)
	}
	if k != kCount {
		vals := make([]int, len(rows))
		for i, r := range rows {
			vals[i], _ = strconv.Atoi(b.t.rows[r][n]) // generated numbers always parse
		}
		gl.answer = []string{aggregateOf(k, vals)}
	}
	others := slices.DeleteFunc([]kind{kCount, kSum, kAvg, kMax, kMin}, func(x kind) bool { return x == k })
	for _, k2 := range pick(b.rng, others, 2) {
		gl.wrong = append(gl.wrong, where(agg(k2, nums[b.rng.IntN(len(nums))])))
	}
	if k != kCount {
		for _, n2 := range pick(b.rng, slices.DeleteFunc(slices.Clone(nums), func(x int) bool { return x == n }), 2) {
			gl.wrong = append(gl.wrong, where(agg(k, n2)))
		}
	}
	for _, v2 := range b.otherValues(f, v, 2) {
		gl.wrong = append(gl.wrong, selectWhere(agg(k, n), th.table, b.col(f), quoteText(v2)))
	}
	if s, ok := b.swapFilter(agg(k, n), f); ok {
		gl.wrong = append(gl.wrong, s)
	}
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	if k != kCount {
		gl.decoys, ok = b.decoys(n, gl.answer)
	}
	return gl, ok
}

// aggregateOf computes an aggregate of integers as SQLite prints it.
func aggregateOf(k kind, vals []int) string {
	sum, lo, hi := 0, vals[0], vals[0]
	for _, v := range vals {
		sum += v
		lo, hi = min(lo, v), max(hi, v)
	}
	switch k {
	case kSum:
		return strconv.Itoa(sum)
	case kAvg:
		return formatFloat(float64(sum) / float64(len(vals)))
	case kMax:
		return strconv.Itoa(hi)
	case kMin:
		return strconv.Itoa(lo)
	}
	return strconv.Itoa(len(vals))
}

// newValue draws a value for column c other than old: another pool value or another number.
func (b builder) newValue(c int, old string) string {
	col := b.th().cols[c]
	for {
		var v string
		switch col.kind {
		case colCat:
			v = col.pool[b.rng.IntN(len(col.pool))]
		case colNum:
			v = randNum(b.rng, col)
		default:
			used := map[string]bool{}
			for _, row := range b.t.rows {
				used[row[0]] = true
			}
			v = freshKey(b.rng, b.th().key, used)
		}
		if v != old {
			return v
		}
	}
}

func (b builder) update() (goal, bool) {
	th := b.th()
	r := b.rng.IntN(len(b.t.rows))
	nk := b.nonKey()
	c := nk[b.rng.IntN(len(nk))]
	key, x := b.t.rows[r][0], b.newValue(c, b.t.rows[r][c])
	set := func(c2 int, val, k string) string {
		return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s", th.table, b.col(c2), b.lit(c, val), b.col(0), quoteText(k))
	}
	gl := goal{
		question: fmt.Sprintf("In the %s table, update the %s whose %s is %s: set its %s to %s.", th.table, th.entity, b.col(0), key, b.col(c), x),
		right:    set(c, x, key),
	}
	for _, c2 := range pick(b.rng, b.nonKey(c), 1) {
		gl.wrong = append(gl.wrong, set(c2, x, key))
	}
	for _, k2 := range b.otherValues(0, key, 2) {
		gl.wrong = append(gl.wrong, set(c, x, k2))
	}
	gl.wrong = append(gl.wrong, set(c, b.newValue(c, x), key))
	gl.wrong = append(gl.wrong, fmt.Sprintf("DELETE FROM %s WHERE %s = %s", th.table, b.col(0), quoteText(key)))
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	rows := cloneRows(b.t.rows)
	rows[r][c] = x
	gl.wantHash = digest(th, rows, nil)
	return gl, true
}

func (b builder) insert() (goal, bool) {
	th := b.th()
	row := make([]string, len(th.cols))
	for c := range th.cols {
		row[c] = b.newValue(c, "")
	}
	stmt := func(vals []string) string {
		names, lits := make([]string, len(th.cols)), make([]string, len(th.cols))
		for c := range th.cols {
			names[c], lits[c] = b.col(c), b.lit(c, vals[c])
		}
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", th.table, strings.Join(names, ", "), strings.Join(lits, ", "))
	}
	pairs := make([]string, len(th.cols))
	for c := range th.cols {
		pairs[c] = b.col(c) + " " + row[c]
	}
	gl := goal{
		question: fmt.Sprintf("Insert into the %s table a new %s with values: %s.", th.table, th.entity, strings.Join(pairs, ", ")),
		right:    stmt(row),
	}
	all := make([]int, len(th.cols))
	for c := range all {
		all[c] = c
	}
	for _, c := range pick(b.rng, all, minWrong) {
		alt := slices.Clone(row)
		alt[c] = b.newValue(c, row[c])
		gl.wrong = append(gl.wrong, stmt(alt))
	}
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	gl.wantHash = digest(th, b.t.rows, row)
	return gl, true
}

func (b builder) delete() (goal, bool) {
	th := b.th()
	f, v, ok := b.filter(1, len(b.t.rows)/2)
	if !ok {
		return goal{}, false
	}
	del := func(c int, val string) string {
		return fmt.Sprintf("DELETE FROM %s WHERE %s = %s", th.table, b.col(c), quoteText(val))
	}
	gl := goal{
		question: fmt.Sprintf("Delete from the %s table every %s whose %s is %s.", th.table, th.entity, b.col(f), v),
		right:    del(f, v),
	}
	for _, v2 := range b.otherValues(f, v, 2) {
		gl.wrong = append(gl.wrong, del(f, v2))
	}
	for _, f2 := range slices.DeleteFunc(b.cols(colCat), func(c int) bool { return c == f }) {
		gl.wrong = append(gl.wrong, del(f2, b.t.rows[b.rng.IntN(len(b.t.rows))][f2]))
	}
	gl.wrong = append(gl.wrong, fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s = %s", th.table, b.col(f), b.col(f), quoteText(v)))
	gl.wrong = append(gl.wrong, b.otherTable(gl.right)...)
	var rows [][]string
	var ids []int
	for i, row := range b.t.rows {
		if row[f] != v {
			rows = append(rows, row)
			ids = append(ids, i+1)
		}
	}
	gl.wantHash = digestIDs(th, rows, ids)
	return gl, true
}

func cloneRows(rows [][]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = slices.Clone(r)
	}
	return out
}

// digest is the table digest of rows (ids 1..n) plus, if extra is set, one more row with the next id.
func digest(th theme, rows [][]string, extra []string) string {
	ids := make([]int, len(rows))
	for i := range rows {
		ids[i] = i + 1
	}
	if extra != nil {
		rows = append(slices.Clip(rows), extra)
		ids = append(ids, len(ids)+1)
	}
	return digestIDs(th, rows, ids)
}

// digestIDs is the table digest of rows with the given ids, as engine.tableHash computes it.
func digestIDs(th theme, rows [][]string, ids []int) string {
	cols := []string{"id"}
	for _, c := range th.cols {
		cols = append(cols, c.name)
	}
	lines := make([][]string, len(rows))
	for i, r := range rows {
		lines[i] = append([]string{strconv.Itoa(ids[i])}, r...)
	}
	return hashRows(cols, lines)
}

// setupSQL creates and fills the tables.
func setupSQL(tables []table) string {
	var b strings.Builder
	for _, t := range tables {
		th := t.theme
		fmt.Fprintf(&b, "CREATE TABLE %s (id INTEGER PRIMARY KEY", th.table)
		for _, c := range th.cols {
			typ := "TEXT"
			if c.kind == colNum {
				typ = "INTEGER"
			}
			fmt.Fprintf(&b, ", %s %s", c.name, typ)
		}
		fmt.Fprintf(&b, ");\nINSERT INTO %s VALUES ", th.table)
		for i, row := range t.rows {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(%d", i+1)
			for c, v := range row {
				if th.cols[c].kind == colNum {
					fmt.Fprintf(&b, ", %s", v)
				} else {
					fmt.Fprintf(&b, ", %s", quoteText(v))
				}
			}
			b.WriteByte(')')
		}
		b.WriteString(";\n")
	}
	return b.String()
}
