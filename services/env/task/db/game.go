package db

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env/task"
)

// Bounds of the commit_final_answer candidates.
const (
	keptResults   = 2 // recent one-column results offered as answers
	maxAnswerRows = 8 // longer results are not offered as answers
)

// seenResult is a one-column query result offered as an answer.
type seenResult struct {
	text  string // all its distinct values, comma-separated
	first string // its first value, when it has several
}

// game is one instance: the tables, the goal, the session database and what the agent has seen. It owns
// all of its state.
type game struct {
	tables      []table
	goal        goal
	instruction string
	observation string
	opening     task.Opening
	dbName      string
	images      *imageCache // the family's, shared by every instance it made

	explores   []string // per table, the statement that shows its columns and first rows
	statements []string // the goal's right and wrong statements, in display order
	normRight  string
	normFirst  string
	normExpl   []string

	eng     *engine
	cleanup runtime.Cleanup
	closed  bool // the database was released; it is never reopened

	explored     []bool
	results      []seenResult // most recent last
	rightSeen    string       // answer text of the latest run of the right query ("" if none since a change)
	rightApplied bool         // the right change ran and changed rows
	firstSeen    bool         // kHop: the first query ran since the last change
	steps        int
	done         bool
	final        task.Result
}

// fresh returns a new game of g's instance, as generated, without its database: it shares the tables,
// goal, texts and statements, which play only reads (the data changes in the session's own database),
// and has its own state of play.
func (g *game) fresh() *game {
	return &game{tables: g.tables, goal: g.goal, instruction: g.instruction, observation: g.observation,
		opening: g.opening, explores: g.explores, statements: g.statements, normRight: g.normRight,
		normFirst: g.normFirst, normExpl: g.normExpl, explored: make([]bool, len(g.tables))}
}

// finish lays out the statements and the opening once the draw is kept.
func (g *game) finish(rng *rand.Rand) {
	for _, t := range g.tables {
		g.explores = append(g.explores, fmt.Sprintf("SELECT * FROM %s LIMIT %d", t.theme.table, exploreRows))
	}
	g.statements = append([]string{g.goal.right}, g.goal.wrong...)
	if g.goal.first != "" {
		g.statements = append(g.statements, g.goal.first)
		g.normFirst = normalizeSQL(g.goal.first)
	}
	rng.Shuffle(len(g.statements), func(i, j int) { g.statements[i], g.statements[j] = g.statements[j], g.statements[i] })
	g.normRight = normalizeSQL(g.goal.right)
	for _, e := range g.explores {
		g.normExpl = append(g.normExpl, normalizeSQL(e))
	}
	g.explored = make([]bool, len(g.tables))
	g.opening = task.Opening{Instruction: g.instruction, Observation: g.observation, Admissible: g.admissible()}
}

// Start returns the opening; the slices are the caller's own.
func (g *game) Start() task.Opening {
	o := g.opening
	o.Admissible = slices.Clone(o.Admissible)
	return o
}

// Close releases the session database. The env host calls it when a session ends early; it is safe to
// call more than once, and later calls of execute_sql report that the database is closed.
func (g *game) Close() error {
	return g.release()
}

func (g *game) release() error {
	g.closed = true
	if g.eng == nil {
		return nil
	}
	g.cleanup.Stop()
	err := g.eng.close()
	g.eng = nil
	return err
}

// Step applies one call; bad calls and failing SQL explain themselves and cost only the turn.
func (g *game) Step(call proto.ToolCall) task.Result {
	if g.done {
		r := g.final
		r.Observation = "The episode is over; the answer was already committed."
		r.Metrics = nil
		return r
	}
	if g.steps >= MaxTurns {
		return task.Result{Observation: fmt.Sprintf("The episode is over: the turn limit of %d was reached.", MaxTurns), Done: true, Status: proto.StatusTurnLimit}
	}
	g.steps++
	var r task.Result
	switch call.Name {
	case ToolSQL:
		r = g.execute(call)
	case ToolCommit:
		r = g.commit(call)
	default:
		r = g.running(fmt.Sprintf("Error: unknown tool %q; available: %s, %s.", call.Name, ToolSQL, ToolCommit), "invalid_call")
	}
	if !r.Done && g.steps >= MaxTurns {
		g.release() // the session ends with this call
	}
	return r
}

// running is a result of a game that goes on; metric, if set, counts what went wrong.
func (g *game) running(obs, metric string) task.Result {
	r := task.Result{Observation: obs, Admissible: g.admissible(), Status: proto.StatusRunning}
	if metric != "" {
		r.Metrics = map[string]float64{metric: 1}
	}
	return r
}

func (g *game) execute(call proto.ToolCall) task.Result {
	stmt, err := stringArg(call, "sql")
	if err != nil {
		return g.running("Error: "+err.Error(), "invalid_call")
	}
	if g.eng == nil && !g.closed {
		eng, err := openEngine(g.dbName, setupSQL(g.tables), g.images)
		if err != nil {
			return g.running("Error: the database could not be opened: "+err.Error(), "sql_error")
		}
		g.eng = eng
		g.cleanup = runtime.AddCleanup(g, func(e *engine) { e.close() }, eng) // an abandoned instance still frees its database
	}
	res, err := g.eng.run(stmt)
	if err != nil {
		return g.running("SQL error: "+err.Error(), "sql_error")
	}
	g.observe(stmt, res)
	return g.running(res.render(), "")
}

// observe records what a successful statement revealed or changed.
func (g *game) observe(stmt string, res result) {
	norm := normalizeSQL(stmt)
	if !res.query {
		g.rightSeen, g.firstSeen = "", false // the data may have changed
		if norm == g.normRight && res.affected > 0 {
			g.rightApplied = true
		}
		return
	}
	if len(res.cols) == 0 {
		return
	}
	if norm == g.normFirst && len(res.rows) > 0 {
		g.firstSeen = true
	}
	toks, _ := lexSQL(stmt) // it ran, so it lexes
	for i, t := range g.tables {
		if mentions(toks, t.theme.table) && (res.statement == "PRAGMA" || showsColumns(res.cols, t.theme)) {
			g.explored[i] = true
		}
	}
	if slices.Contains(g.normExpl, norm) || len(res.cols) != 1 || len(res.rows) == 0 || len(res.rows) > maxAnswerRows || res.more {
		return
	}
	sr := seenResult{text: answerText(res)}
	if len(res.rows) > 1 {
		sr.first = res.rows[0][0]
	}
	g.results = slices.DeleteFunc(g.results, func(x seenResult) bool { return x.text == sr.text })
	g.results = append(g.results, sr)
	if len(g.results) > keptResults {
		g.results = g.results[len(g.results)-keptResults:]
	}
	if norm == g.normRight {
		g.rightSeen = sr.text
	}
}

// mentions reports whether a statement's tokens name table.
func mentions(toks []string, table string) bool {
	for _, t := range toks {
		if strings.EqualFold(strings.Trim(t, "\"`[]"), table) {
			return true
		}
	}
	return false
}

// showsColumns reports whether a result's header holds every column of a theme.
func showsColumns(cols []string, th theme) bool {
	for _, c := range th.cols {
		if !slices.ContainsFunc(cols, func(x string) bool { return strings.EqualFold(x, c.name) }) {
			return false
		}
	}
	return true
}

// answerText joins a one-column result's distinct values, as an answer is written.
func answerText(res result) string {
	var vals []string
	for _, row := range res.rows {
		if !slices.Contains(vals, row[0]) {
			vals = append(vals, row[0])
		}
	}
	return strings.Join(vals, ", ")
}

func (g *game) commit(call proto.ToolCall) task.Result {
	ans, err := answerArg(call)
	if err != nil {
		return g.running("Error: "+err.Error(), "invalid_call")
	}
	var ok bool
	var obs string
	gl := g.goal
	if gl.kind.mutation() {
		tbl := g.tables[gl.table]
		var h string
		if g.eng == nil {
			h = digest(tbl.theme, tbl.rows, nil) // nothing ran, so the table is as generated
		} else {
			h, err = g.eng.tableHash(tbl.theme.table)
		}
		ok = err == nil && h == gl.wantHash
		if ok {
			obs = fmt.Sprintf("Committed. The %s table matches the requested change.", tbl.theme.table)
		} else {
			obs = fmt.Sprintf("Committed. The %s table does not match the requested change.", tbl.theme.table)
		}
	} else {
		ok = sameAnswer(ans, gl.answer)
		if ok {
			obs = fmt.Sprintf("Committed %q: correct.", ans)
		} else {
			obs = fmt.Sprintf("Committed %q: wrong.", ans)
		}
	}
	g.done = true
	g.final = task.Result{Observation: obs, Done: true, Status: proto.StatusCompleted}
	if ok {
		g.final.Reward = 1
	}
	g.release()
	return g.final
}

// admissible lists the calls that make sense now: look at each table, the goal's statements once its
// table was seen, and answers built from what queries returned.
func (g *game) admissible() []proto.ToolCall {
	var out []proto.ToolCall
	for _, e := range g.explores {
		out = append(out, sqlCall(e))
	}
	seen := g.explored[g.goal.table]
	if seen {
		for _, s := range g.statements {
			out = append(out, sqlCall(s))
		}
	}
	var answers []string
	add := func(a string) {
		if a != "" && !slices.Contains(answers, a) {
			answers = append(answers, a)
		}
	}
	for i := len(g.results) - 1; i >= 0; i-- {
		add(g.results[i].text)
	}
	if n := len(g.results); n > 0 {
		add(g.results[n-1].first)
	}
	if seen {
		for _, d := range g.goal.decoys {
			add(d)
		}
	}
	add("done")
	for _, a := range answers {
		out = append(out, commitCall(a))
	}
	return out
}

// sqlCall is the execute_sql call of one statement.
func sqlCall(stmt string) proto.ToolCall {
	b, _ := json.Marshal(struct {
		SQL string `json:"sql"`
	}{stmt}) // a struct of one string always marshals
	return proto.ToolCall{Name: ToolSQL, Arguments: string(b)}
}

// commitCall is the commit_final_answer call of one answer.
func commitCall(answer string) proto.ToolCall {
	b, _ := json.Marshal(struct {
		Answer string `json:"answer"`
	}{answer}) // a struct of one string always marshals
	return proto.ToolCall{Name: ToolCommit, Arguments: string(b)}
}

// parseArgs decodes a call's arguments as a JSON object with exactly the property want.
func parseArgs(call proto.ToolCall, want string) (json.RawMessage, error) {
	raw := strings.TrimSpace(call.Arguments)
	if raw == "" {
		return nil, fmt.Errorf(`bad arguments: empty; want a JSON object like {%q: "..."}`, want)
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &args); err != nil || args == nil {
		return nil, fmt.Errorf(`bad arguments: not a JSON object (%v); want {%q: "..."}`, err, want)
	}
	v, ok := args[want]
	if !ok {
		return nil, fmt.Errorf("bad arguments: missing required %q", want)
	}
	for k := range args {
		if k != want {
			return nil, fmt.Errorf("bad arguments: unknown argument %q; %s takes only %q", k, call.Name, want)
		}
	}
	return v, nil
}

// stringArg is a call's one string argument.
func stringArg(call proto.ToolCall, name string) (string, error) {
	v, err := parseArgs(call, name)
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("bad arguments: %q must be a string, got %s", name, v)
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("bad arguments: %q is empty", name)
	}
	return s, nil
}

// answerArg is commit_final_answer's answer. Besides the documented string it takes a number or a list
// of strings and numbers, which agents often send.
func answerArg(call proto.ToolCall) (string, error) {
	v, err := parseArgs(call, "answer")
	if err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, nil
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), nil
	}
	var list []json.RawMessage
	if json.Unmarshal(v, &list) == nil {
		parts := make([]string, 0, len(list))
		for _, x := range list {
			var s string
			var n json.Number
			switch {
			case json.Unmarshal(x, &s) == nil:
				parts = append(parts, s)
			case json.Unmarshal(x, &n) == nil:
				parts = append(parts, n.String())
			default:
				return "", fmt.Errorf(`bad arguments: "answer" list items must be strings or numbers, got %s`, x)
			}
		}
		return strings.Join(parts, ", "), nil
	}
	return "", fmt.Errorf(`bad arguments: "answer" must be a string (a comma-separated list of values), got %s`, v)
}
