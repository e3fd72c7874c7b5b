package db

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
	"github.com/jetrl/jetrl/services/env/task/tasktest"
)

// newGame generates (split, seed) with a database name of its own.
func newGame(t testing.TB, split string, seed uint64) *game {
	t.Helper()
	g, err := generate(split, seed)
	if err != nil {
		t.Fatal(err)
	}
	g.dbName = dbName(split, seed, 0) + "-" + t.Name()
	return g
}

// canonical renders everything generated: the opening and the data.
func (g *game) canonical() string {
	return g.instruction + "\n" + g.observation + "\n" + setupSQL(g.tables)
}

// sample is n, or a quarter of it under the race detector, which slows generation and SQLite ~15x.
func sample(n uint64) uint64 {
	if raceEnabled {
		return n / 4
	}
	return n
}

func answerOf(call proto.ToolCall) string {
	s, _ := answerArg(call)
	return s
}

func TestCheckStatement(t *testing.T) {
	for _, tc := range []struct {
		sql, kw, err string
	}{
		{"SELECT 1", "SELECT", ""},
		{"  select * from t;  ", "SELECT", ""},
		{"SELECT ';' FROM t;;", "SELECT", ""},
		{"-- note\nUPDATE t SET a = 1 /* why */ WHERE b = 'x;y'", "UPDATE", ""},
		{`SELECT "a;b" FROM [t;1]`, "SELECT", ""},
		{"SELECT 'it''s'", "SELECT", ""},
		{"with x as (select 1) select * from x", "WITH", ""},
		{"SELECT 1; SELECT 2", "", "one statement at a time"},
		{"DELETE FROM t; --", "DELETE", ""},
		{"", "", "empty statement"},
		{" ; ", "", "empty statement"},
		{"-- only a comment", "", "empty statement"},
		{"SELECT 'open", "", "unterminated quote"},
		{"SELECT 1 /* open", "", "unterminated /* comment"},
		{"ATTACH 'x.db' AS x", "", "not allowed"},
		{"vacuum into '/tmp/x.db'", "", "not allowed"},
		{"detach x", "", "not allowed"},
	} {
		kw, err := checkStatement(tc.sql)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("checkStatement(%q): %v", tc.sql, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("checkStatement(%q) error %v, want one containing %q", tc.sql, err, tc.err)
		case kw != tc.kw:
			t.Errorf("checkStatement(%q) keyword %q, want %q", tc.sql, kw, tc.kw)
		}
	}
}

func TestNormalizeSQL(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"SELECT salary FROM employees WHERE name = 'Alice Smith'", "select  salary\nfrom employees where name='Alice Smith';"},
		{"SELECT * FROM employees LIMIT 5", `SELECT * FROM "employees" LIMIT 5`},
		{"SELECT COUNT(*) FROM t", "select count ( * ) from t ;"},
	} {
		if na, nb := normalizeSQL(tc.a), normalizeSQL(tc.b); na != nb {
			t.Errorf("normalizeSQL: %q -> %q but %q -> %q", tc.a, na, tc.b, nb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"SELECT a FROM t WHERE b = 'Sales'", "SELECT a FROM t WHERE b = 'sales'"}, // values keep their case
		{"SELECT a FROM t", "SELECT b FROM t"},
	} {
		if normalizeSQL(tc.a) == normalizeSQL(tc.b) {
			t.Errorf("normalizeSQL(%q) equals normalizeSQL(%q)", tc.a, tc.b)
		}
	}
}

func TestSameAnswer(t *testing.T) {
	for _, tc := range []struct {
		ans  string
		want []string
		ok   bool
	}{
		{"72000", []string{"72000"}, true},
		{"72000.0", []string{"72000"}, true},
		{" '72000' ", []string{"72000"}, true},
		{"[72000]", []string{"72000"}, true},
		{"72001", []string{"72000"}, false},
		{"61333.33", []string{"61333.3333"}, true},
		{"61333.333333333336", []string{"61333.3333"}, true},
		{"61333", []string{"61333.3333"}, false},
		{"Alice Smith, Bruno Jones", []string{"Bruno Jones", "Alice Smith"}, true},
		{"alice smith,bruno  jones", []string{"Bruno Jones", "Alice Smith"}, true},
		{"('Alice Smith',), ('Bruno Jones',)", []string{"Bruno Jones", "Alice Smith"}, true},
		{"Alice Smith, Alice Smith, Bruno Jones", []string{"Bruno Jones", "Alice Smith"}, true},
		{"Alice Smith", []string{"Bruno Jones", "Alice Smith"}, false},
		{"Alice Smith, Bruno Jones, Carla Rossi", []string{"Bruno Jones", "Alice Smith"}, false},
		{"", []string{"5"}, false},
		{"done", []string{"5"}, false},
	} {
		if got := sameAnswer(tc.ans, tc.want); got != tc.ok {
			t.Errorf("sameAnswer(%q, %q) = %v, want %v", tc.ans, tc.want, got, tc.ok)
		}
	}
}

func TestAnswerArg(t *testing.T) {
	for _, tc := range []struct {
		args, want, err string
	}{
		{`{"answer": "Alice Smith, 3"}`, "Alice Smith, 3", ""},
		{`{"answer": 42}`, "42", ""},
		{`{"answer": 61333.33}`, "61333.33", ""},
		{`{"answer": ["Alice Smith", 3]}`, "Alice Smith, 3", ""},
		{`{"answer": ""}`, "", ""},
		{`{"answer": {"x": 1}}`, "", "bad arguments"},
		{`{"answer": [[1]]}`, "", "bad arguments"},
		{`{"answer": "x", "extra": 1}`, "", "unknown argument"},
		{`{}`, "", "missing required"},
		{`[1]`, "", "not a JSON object"},
		{``, "", "bad arguments: empty"},
	} {
		got, err := answerArg(proto.ToolCall{Name: ToolCommit, Arguments: tc.args})
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("answerArg(%s) = %q, %v; want %q", tc.args, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("answerArg(%s) error %v, want one containing %q", tc.args, err, tc.err)
		}
	}
}

const sandboxSetup = "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, n INTEGER);\n" +
	"INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30);"

// TestEngineSandbox runs agent SQL on an engine that ran its setup script and on one opened from the
// image the first kept: the bounds hold on both.
func TestEngineSandbox(t *testing.T) {
	images := task.NewRecent[string, []byte](imagesKept)
	for i, from := range []string{"script", "image"} {
		t.Run(from, func(t *testing.T) {
			testEngineSandbox(t, images)
			if st := images.Stats(); st.Kept != 1 || st.Hits != uint64(i) || st.Misses != 1 {
				t.Errorf("images: %d kept, %d hits, %d misses; want 1, %d, 1", st.Kept, st.Hits, st.Misses, i)
			}
		})
	}
}

func testEngineSandbox(t *testing.T, images *imageCache) {
	e, err := openEngine("sandbox-"+strings.ReplaceAll(t.Name(), "/", "-"), sandboxSetup, images)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	dir := t.TempDir()
	for _, tc := range []struct {
		sql, out, err string
	}{
		{"SELECT name FROM t WHERE n > 15", "name\nb\nc\n(2 rows)", ""},
		{"SELECT AVG(n) * 1.0 / 7 FROM t", "AVG(n) * 1.0 / 7\n2.8571\n(1 row)", ""},
		{"SELECT * FROM t WHERE n > 99", "id | name | n\n(0 rows)", ""},
		{"UPDATE t SET n = n + 1 WHERE id < 3", "Query OK, 2 rows affected.", ""},
		{"PRAGMA table_info(t)", "cid | name | type | notnull | dflt_value | pk", ""},
		{"SELECT nope FROM t", "", "no such column: nope"},
		{"ATTACH '" + filepath.Join(dir, "x.db") + "' AS x", "", "not allowed"},
		{"SELECT * FROM pragma_table_info('t') JOIN (SELECT 1)", "", ""},
		{"PRAGMA journal_mode = WAL", "", "not authorized"},
		{"PRAGMA max_page_count = 1000000", "", "not authorized"},
		{"SELECT load_extension('x')", "", "not authorized"},
		{"SELECT zeroblob(10000000)", "", "too big"},
		{"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "", "interrupted"},
		{"SELECT 1; DROP TABLE t", "", "one statement"},
		{"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100) INSERT INTO t (name) SELECT zeroblob(90000) FROM c", "", "full"},
		{"SELECT count(*), sum(n) FROM t", "count(*) | sum(n)\n3 | 62\n(1 row)", ""},
	} {
		// The runaway statement is given 200 ms; the rest the engine's bound, which a loaded machine's
		// legitimate statements (filling the database to its cap among them) keep well away from.
		e.timeout = stmtTimeout
		if tc.err == "interrupted" {
			e.timeout = 200 * time.Millisecond
		}
		res, err := e.run(tc.sql)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.sql, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.sql, err, tc.err)
		case tc.err == "" && !strings.HasPrefix(res.render(), tc.out):
			t.Errorf("%s: rendered\n%s\nwant it to start with\n%s", tc.sql, res.render(), tc.out)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) > 0 {
		t.Errorf("agent SQL created files: %v", files)
	}
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.run("SELECT 1"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("run after close: %v", err)
	}
	if err := e.close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestRender(t *testing.T) {
	var rows [][]string
	for i := range 30 {
		rows = append(rows, []string{fmt.Sprint(i), strings.Repeat("x", 100)})
	}
	for _, tc := range []struct {
		r    result
		want []string
	}{
		{result{query: true, cols: []string{"n", "s"}, rows: rows}, []string{"(20 of 30 rows shown)", strings.Repeat("x", maxCellRunes-1) + "…"}},
		{result{query: true, cols: []string{"n", "s"}, rows: rows, more: true}, []string{"(20 of 30+ rows shown)"}},
		{result{query: true, cols: []string{"n"}, rows: [][]string{{"a\nb"}}}, []string{"n\na b\n(1 row)"}},
		{result{query: true}, []string{"Query OK."}},
		{result{affected: 1}, []string{"Query OK, 1 row affected."}},
		{result{affected: 0}, []string{"Query OK, 0 rows affected."}},
	} {
		got := tc.r.render()
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("render:\n%s\nwant it to contain %q", got, w)
			}
		}
		if len(got) > maxObsBytes+200 {
			t.Errorf("render is %d bytes", len(got))
		}
	}
}

func TestFormatFloat(t *testing.T) {
	for f, want := range map[float64]string{42: "42", 7.5: "7.5", 61333.333333333336: "61333.3333", -0.25: "-0.25", 1e20: "100000000000000000000"} {
		if got := formatFloat(f); got != want {
			t.Errorf("formatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestManyDistinctInstances(t *testing.T) {
	n := 12_000
	if raceEnabled {
		n = 2000
	}
	seen := map[string]bool{}
	for seed := range uint64(n) {
		seen[newGame(t, proto.SplitTrain, seed).canonical()] = true
	}
	if len(seen) < n*99/100 {
		t.Fatalf("%d distinct instances among %d train seeds", len(seen), n)
	}
}

func TestSplitsPartitionByKey(t *testing.T) {
	for seed := range sample(1000) {
		for _, split := range []string{proto.SplitTrain, proto.SplitHeldout} {
			g := newGame(t, split, seed)
			if held := g.splitKey()%heldoutModulus == 0; held != (split == proto.SplitHeldout) {
				t.Fatalf("%s seed %d has split key %d", split, seed, g.splitKey())
			}
		}
	}
	if _, err := New().New("test", 1); !errors.Is(err, proto.ErrUnknownSplit) {
		t.Fatalf("unknown split: %v", err)
	}
}

// TestGoals checks, per generated goal, what the learner relies on: the right statement's words all
// occur in the instruction (for two-step questions, the first query's do), every wrong statement has a
// word that does not, the decoy answers are wrong, and every kind occurs.
func TestGoals(t *testing.T) {
	kinds := map[kind]int{}
	n := sample(3000)
	for seed := range n {
		g := newGame(t, proto.SplitHeldout, seed)
		gl := g.goal
		kinds[gl.kind]++
		inst := map[string]bool{}
		for _, w := range words(g.instruction) {
			inst[w] = true
		}
		covered := func(s string) bool {
			return !slices.ContainsFunc(words(s), func(w string) bool { return !inst[w] })
		}
		revealing := gl.right
		if gl.kind == kHop {
			revealing = gl.first
		}
		if !covered(revealing) {
			t.Fatalf("seed %d: %q has words the instruction %q lacks", seed, revealing, g.instruction)
		}
		if len(gl.wrong) < minWrong {
			t.Fatalf("seed %d: %d wrong statements", seed, len(gl.wrong))
		}
		for _, w := range gl.wrong {
			if covered(w) || w == gl.right || w == gl.first {
				t.Fatalf("seed %d: wrong statement %q is not told apart by the instruction %q", seed, w, g.instruction)
			}
		}
		if gl.kind.mutation() != (gl.wantHash != "") || gl.kind.mutation() == (len(gl.answer) > 0) {
			t.Fatalf("seed %d: %s goal with answer %q and digest %q", seed, gl.kind, gl.answer, gl.wantHash)
		}
		for _, d := range gl.decoys {
			if sameAnswer(d, gl.answer) {
				t.Fatalf("seed %d: decoy %q is the answer", seed, d)
			}
		}
		if n := len(g.tables[gl.table].rows); n < minRows || n > maxRows {
			t.Fatalf("seed %d: %d rows", seed, n)
		}
	}
	for k := range numKinds {
		if kinds[k] < int(n)/50 {
			t.Errorf("kind %s: %d of %d goals", k, kinds[k], n)
		}
	}
	t.Logf("goal kinds: %v", kinds)
}

// TestImageIsolation: sessions of one instance open its database from the first's image, and what one
// changes no other sees, before or after.
func TestImageIsolation(t *testing.T) {
	f := New()
	var seed uint64
	for ; ; seed++ {
		if newGame(t, proto.SplitTrain, seed).goal.kind.mutation() {
			break
		}
	}
	play := func() *game {
		inst, err := f.New(proto.SplitTrain, seed)
		if err != nil {
			t.Fatal(err)
		}
		return inst.(*game)
	}
	first, second := play(), play()
	first.Step(first.Solve()) // opens the database: a miss, its image kept
	second.Step(sqlCall("SELECT 1"))
	if st := f.images.Stats(); st.Kept != 1 || st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("images: %d kept, %d hits, %d misses; want 1, 1, 1", st.Kept, st.Hits, st.Misses)
	}
	for !first.done {
		first.Step(first.Solve())
	}
	if first.final.Reward != 1 {
		t.Fatalf("the solver's change did not win: %+v", first.final)
	}
	tbl := second.tables[second.goal.table]
	want := digest(tbl.theme, tbl.rows, nil)
	if h, err := second.eng.tableHash(tbl.theme.table); err != nil || h != want {
		t.Fatalf("the second session sees the first's change: digest %s (%v), generated %s", h, err, want)
	}
	for !second.done {
		second.Step(second.Solve())
	}
	third := play()
	third.Step(sqlCall("SELECT 1"))
	if h, err := third.eng.tableHash(tbl.theme.table); err != nil || h != want {
		t.Fatalf("a later session sees an earlier one's change: digest %s (%v), generated %s", h, err, want)
	}
	third.Close()
	if second.final.Reward != 1 {
		t.Fatalf("the second session, opened from the image, did not win: %+v", second.final)
	}
}

// TestEngineAgreesWithGoals runs each goal's statements on the real engine: the right query returns the
// expected answer, the right change produces the expected digest, and the untouched table has the
// generated digest.
func TestEngineAgreesWithGoals(t *testing.T) {
	for seed := range sample(400) {
		g := newGame(t, proto.SplitTrain, seed)
		gl := g.goal
		tbl := g.tables[gl.table]
		e, err := openEngine(g.dbName, setupSQL(g.tables), nil)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := e.tableHash(tbl.theme.table); err != nil || h != digest(tbl.theme, tbl.rows, nil) {
			t.Fatalf("seed %d: fresh table digest %s (%v), generated %s", seed, h, err, digest(tbl.theme, tbl.rows, nil))
		}
		if gl.first != "" {
			res, err := e.run(gl.first)
			if err != nil || len(res.rows) != 1 || !strings.Contains(gl.right, quoteText(res.rows[0][0])) {
				t.Fatalf("seed %d: first query %q gave %v (%v); right statement %q", seed, gl.first, res.rows, err, gl.right)
			}
		}
		res, err := e.run(gl.right)
		if err != nil {
			t.Fatalf("seed %d: %q: %v", seed, gl.right, err)
		}
		if gl.kind.mutation() {
			if h, err := e.tableHash(tbl.theme.table); err != nil || h != gl.wantHash {
				t.Fatalf("seed %d: %s %q left digest %s (%v), want %s", seed, gl.kind, gl.right, h, err, gl.wantHash)
			}
		} else if got := answerText(res); !sameAnswer(got, gl.answer) {
			t.Fatalf("seed %d: %s %q returned %q, expected %q", seed, gl.kind, gl.right, got, gl.answer)
		}
		if err := e.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRevealingQuery: along the solver's path, no admissible answer is right before the query that
// reveals it, the admissible list stays 5–25 long, and the right statement is listed once the asked
// table was seen.
func TestRevealingQuery(t *testing.T) {
	for seed := range sample(300) {
		g := newGame(t, proto.SplitHeldout, seed)
		adm := g.Start().Admissible
		for step := 0; ; step++ {
			if n := len(adm); n < 2 || n > 25 || (step > 0 && n < 5) {
				t.Fatalf("seed %d step %d: %d admissible calls", seed, step, n)
			}
			if g.explored[g.goal.table] && !slices.Contains(adm, sqlCall(g.goal.right)) {
				t.Fatalf("seed %d step %d: right statement not admissible", seed, step)
			}
			if !g.goal.kind.mutation() && g.rightSeen == "" {
				for _, c := range adm {
					if c.Name == ToolCommit && sameAnswer(answerOf(c), g.goal.answer) {
						t.Fatalf("seed %d step %d: answer %q admissible before the revealing query", seed, step, answerOf(c))
					}
				}
			}
			r := g.Step(g.Solve())
			if r.Done {
				if r.Reward != 1 {
					t.Fatalf("seed %d: solver lost: %s", seed, r.Observation)
				}
				break
			}
			adm = r.Admissible
		}
	}
}

// TestAgentSQL plays as an LLM might: its own spelling of the statements, a subquery instead of two
// steps, a mutation checked by the table's content however it was written.
func TestAgentSQL(t *testing.T) {
	done := map[kind]bool{}
	for seed := uint64(0); len(done) < int(numKinds) && seed < 2000; seed++ {
		g := newGame(t, proto.SplitTrain, seed)
		gl := g.goal
		if done[gl.kind] {
			continue
		}
		done[gl.kind] = true
		tbl := g.tables[gl.table].theme.table
		r := g.Step(sqlCall("select *\nfrom " + strings.ToUpper(tbl) + ";"))
		if !g.explored[gl.table] || !slices.Contains(r.Admissible, sqlCall(gl.right)) {
			t.Fatalf("seed %d: a lower-case SELECT * did not count as looking at %s:\n%s", seed, tbl, r.Observation)
		}
		stmt := strings.ToLower(gl.right[:1]) + gl.right[1:] + " ;"
		if gl.kind == kHop { // one statement: the first query as a subquery
			i := strings.LastIndex(gl.right, "'")
			j := strings.LastIndex(gl.right[:i], "'")
			stmt = gl.right[:j] + "(" + gl.first + ")"
		}
		r = g.Step(sqlCall(stmt))
		if r.Metrics["sql_error"] > 0 {
			t.Fatalf("seed %d: %s: %s", seed, stmt, r.Observation)
		}
		ans := "done"
		if !gl.kind.mutation() {
			lines := strings.Split(r.Observation, "\n")
			ans = strings.Join(lines[1:len(lines)-1], ",")
		}
		if r = g.Step(commitCall(ans)); !r.Done || r.Reward != 1 || r.Status != proto.StatusCompleted {
			t.Fatalf("seed %d %s: %s then commit %q: %+v", seed, gl.kind, stmt, ans, r)
		}
	}
	if len(done) < int(numKinds) {
		t.Fatalf("only kinds %v met", done)
	}
}

func TestWrongAnswersLose(t *testing.T) {
	for seed := range sample(200) {
		g := newGame(t, proto.SplitHeldout, seed)
		g.Step(g.Solve())
		var commit proto.ToolCall
		for _, c := range g.admissible() {
			if c.Name == ToolCommit {
				commit = c // "done" before any change, or a decoy
			}
		}
		r := g.Step(commit)
		if !r.Done || r.Reward != 0 || r.Status != proto.StatusCompleted {
			t.Fatalf("seed %d %s: early commit %s: %+v", seed, g.goal.kind, commit.Text(), r)
		}
		if again := g.Step(g.Solve()); !again.Done || again.Reward != 0 {
			t.Fatalf("seed %d: step after the end: %+v", seed, again)
		}
	}
}

func TestBadCallsKeepState(t *testing.T) {
	g := newGame(t, proto.SplitTrain, 3)
	want := g.Solve()
	for _, c := range []proto.ToolCall{
		{Name: "bash_action", Arguments: `{"script": "ls"}`},
		{Name: ToolSQL, Arguments: `{"query": "SELECT 1"}`},
		{Name: ToolSQL, Arguments: `{"sql": ""}`},
		{Name: ToolSQL, Arguments: `{"sql": 1}`},
		{Name: ToolSQL, Arguments: `not json`},
		{Name: ToolCommit, Arguments: `{"answer": true}`},
	} {
		r := g.Step(c)
		if r.Done || r.Metrics["invalid_call"] != 1 || !strings.HasPrefix(r.Observation, "Error: ") || len(r.Admissible) == 0 {
			t.Errorf("%s %s: %+v", c.Name, c.Arguments, r)
		}
	}
	r := g.Step(sqlCall("SELEC nonsense"))
	if r.Done || r.Metrics["sql_error"] != 1 || !strings.Contains(r.Observation, "syntax error") {
		t.Errorf("bad SQL: %+v", r)
	}
	if got := g.Solve(); got != want {
		t.Errorf("bad calls changed the solver's call from %v to %v", want, got)
	}
}

// TestDatabaseLifetime: the database opens at the first statement and closes at the end of the
// episode, whether by a commit, the turn limit or Close.
func TestDatabaseLifetime(t *testing.T) {
	f := New()
	inst, err := f.New(proto.SplitTrain, 5)
	if err != nil {
		t.Fatal(err)
	}
	g := inst.(*game)
	if g.eng != nil {
		t.Fatal("database open before any statement")
	}
	for !g.done {
		g.Step(g.Solve())
	}
	if g.eng != nil {
		t.Fatal("database still open after the commit")
	}

	s, open, err := task.NewSession(f, proto.SplitTrain, 6)
	if err != nil {
		t.Fatal(err)
	}
	for !s.Done() {
		if _, err := s.Step(open.Admissible[0]); err != nil {
			t.Fatal(err)
		}
	}
	// NewSession keeps the instance to itself; replay the same calls on one we hold.
	inst, _ = f.New(proto.SplitTrain, 6)
	g = inst.(*game)
	for range MaxTurns {
		g.Step(open.Admissible[0])
	}
	if g.eng != nil || !g.closed {
		t.Fatal("database still open after the turn limit")
	}

	inst, _ = f.New(proto.SplitTrain, 7)
	g = inst.(*game)
	g.Step(g.Solve())
	if g.eng == nil {
		t.Fatal("database not opened by a statement")
	}
	closer, ok := inst.(interface{ Close() error })
	if !ok {
		t.Fatal("instance has no Close method")
	}
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if r := g.Step(g.Solve()); r.Done || !strings.Contains(r.Observation, "closed") {
		t.Fatalf("statement after Close: %+v", r)
	}
}

// BenchmarkOpenEngine opens an instance's database by running its setup script and by copying the image
// an earlier session of the instance kept.
func BenchmarkOpenEngine(b *testing.B) {
	g := newGame(b, proto.SplitTrain, 1)
	setup := setupSQL(g.tables)
	for _, from := range []string{"script", "image"} {
		b.Run(from, func(b *testing.B) {
			var images *imageCache
			if from == "image" {
				images = task.NewRecent[string, []byte](imagesKept)
				e, err := openEngine("bench-first", setup, images)
				if err != nil {
					b.Fatal(err)
				}
				e.close()
			}
			n := 0
			for b.Loop() {
				n++
				e, err := openEngine(fmt.Sprintf("bench-%s-%d", from, n), setup, images)
				if err != nil {
					b.Fatal(err)
				}
				e.close()
			}
		})
	}
}

// TestRecentInstances: the sessions of an instance after its first share its generated tables; the
// conformance suite's Determinism check plays two sessions of an instance one after the other and
// requires the same results, so what one session does shows in no other.
func TestRecentInstances(t *testing.T) {
	const seeds, sessions = 20, 3
	f := New()
	for seed, insts := range tasktest.Sessions(t, f, seeds, sessions) {
		a, b := insts[0].(*game), insts[sessions-1].(*game)
		if &a.tables[0] != &b.tables[0] || a == b {
			t.Fatalf("seed %d: the sessions do not share the instance's tables", seed)
		}
	}
	if st := f.recent.Stats(); st.Kept != seeds || st.Hits != seeds*(sessions-1) || st.Misses != seeds {
		t.Errorf("recent: %d kept, %d hits, %d misses; want %d, %d, %d", st.Kept, st.Hits, st.Misses, seeds, seeds*(sessions-1), seeds)
	}
}
